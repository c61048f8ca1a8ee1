// A concurrency permit that returns itself when it goes out of scope (the
// Seastar idea). The owner (the shell's cluster, or a test fixture) decides
// what "now" is when the permit comes back; core code never reads a clock.
#pragma once

#include <cstdint>
#include <utility>

namespace levee::core {

class PermitOwner {
 public:
  virtual void release_permit(std::uint64_t token) noexcept = 0;

 protected:
  ~PermitOwner() = default;
};

class Permit {
 public:
  Permit() noexcept = default;
  Permit(PermitOwner* owner, std::uint64_t token) noexcept : owner_(owner), token_(token) {}
  Permit(Permit&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), token_(o.token_) {}
  Permit& operator=(Permit&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = std::exchange(o.owner_, nullptr);
      token_ = o.token_;
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { reset(); }

  explicit operator bool() const noexcept { return owner_ != nullptr; }
  std::uint64_t token() const noexcept { return token_; }

  /// Returns the permit now (idempotent).
  void reset() noexcept {
    if (auto* o = std::exchange(owner_, nullptr)) o->release_permit(token_);
  }
  /// Gives up ownership without returning the permit (the caller took over).
  std::uint64_t release() noexcept {
    owner_ = nullptr;
    return token_;
  }

 private:
  PermitOwner* owner_ = nullptr;
  std::uint64_t token_ = 0;
};

}  // namespace levee::core
