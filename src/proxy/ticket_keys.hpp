// Session-ticket keys of one listener, kept with its slot so that they
// survive reloads (a reload that drew new keys would send every returning
// client through a full handshake at once: a handshake storm of levee's own
// making). The newest key encrypts new tickets; older ones still decrypt
// (and the ticket is then renewed under the newest) until they age out.
// Keys are drawn from OpenSSL's CSPRNG and rotated on an interval, or read
// from a file shared by a fleet (nginx's 80-byte layout: name 16, HMAC key
// 32, AES key 32; the first record encrypts), which its operator rotates.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "core/time.hpp"

namespace levee::proxy {

class TicketKeys {
 public:
  struct Key {
    std::array<unsigned char, 16> name{};
    std::array<unsigned char, 32> hmac{};
    std::array<unsigned char, 32> aes{};
  };

  /// Draws a new encrypting key when `interval` has passed since the last
  /// one (or there is none), keeping at most `keep` keys. Not for keys from
  /// a file. True when it rotated.
  bool maybe_rotate(core::TimePoint now, core::Duration interval, std::size_t keep);
  /// Replaces the keys with a file's (80 bytes per key, at most 16 keys).
  /// False, with why, when the file cannot be read or is not whole keys.
  bool load_file(const std::string& path, std::string& why);
  /// Back to keys of levee's own, after a config that named a file (the
  /// file's keys are dropped: they are the fleet's, not to be kept).
  void use_generated();
  /// Checks a key file without loading it (for --validate).
  static bool check_file(const std::string& path, std::string& why);

  std::optional<Key> encrypting() const;
  /// The key a ticket names, and whether it is the encrypting one.
  std::optional<std::pair<Key, bool>> find(const unsigned char* name) const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::deque<Key> keys_;  ///< newest first
  core::TimePoint rotated_{};
  bool from_file_ = false;
};

}  // namespace levee::proxy
