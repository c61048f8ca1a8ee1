// Backends: levee-backend's model. A fixed pool of workers; each request
// holds one for a service time drawn when it arrives (fixed, exponential,
// uniform or lognormal); the rest wait in an unbounded FIFO, as a naive
// server's accept queue and thread pool do, and a request whose client has
// gone is still worked on (nobody tells a naive server). Every answer
// carries ORCA load: the request's cost (service time x cost factor) and
// the worker utilization.
//
// Beyond levee-backend: a cold restart (slower for warmup_seconds, "slow"
// uniformly or "thrash" with the square of its own concurrency, as
// levee-backend's --warmup-mode), failures and hangs, kill and restart, a
// crash when its queue grows past a threshold (memory, in a real one) with
// an automatic restart, and a downstream call: a service in a stack of
// hops holds its worker while it calls the next hop through a Caller.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "sim/clients.hpp"
#include "sim/network.hpp"

namespace levee::sim {

/// "fixed:10ms", "exp:10ms", "uniform:5ms:15ms", "lognormal:10ms:0.5" (mean, sigma).
struct ServiceTime {
  enum class Kind : std::uint8_t { Fixed, Exp, Uniform, Lognormal };
  Kind kind = Kind::Fixed;
  double a_ms = 10, b = 0;
  static std::optional<ServiceTime> parse(std::string_view spec);
  double draw_ms(Rng& r) const;
  double mean_ms() const;
};

struct DownstreamConfig {
  std::string target;      ///< a group name
  CallerPolicy policy;     ///< how the service retries its own calls
  Duration timeout = std::chrono::seconds(1);  ///< its own deadline for the call
};

struct BackendConfig {
  std::string name;
  std::uint32_t instances = 1;
  std::uint32_t workers = 10;  ///< 0: unlimited
  ServiceTime service;
  double cost_factor = 1.0;
  bool orca = true;
  double warmup_seconds = 0;  ///< a restarted instance is cold for this long
  double warmup_factor = 1;
  bool thrash = false;         ///< warmup_mode: thrash
  std::uint32_t crash_queue = 0;   ///< crash when the FIFO exceeds this (0: never)
  Duration restart_after = std::chrono::seconds(5);  ///< after a crash
  std::optional<DownstreamConfig> downstream;
};

class Backend final : public Handler, public Node, public CallOwner {
 public:
  Backend(Engine& e, Wire& w, const BackendConfig& cfg, std::uint32_t index);

  /// Set once every group exists (a service's next hop).
  void connect(std::vector<Node*> downstream_targets, Caller* caller);

  std::uint64_t receive(const Call& c, Peer* from, std::uint64_t cookie) override;
  void abandon(std::uint64_t ticket) override;
  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;
  void on_send(std::uint64_t, std::uint32_t) override {}
  void on_outcome(std::uint64_t cookie, const Outcome& o) override;

  // --- faults (scenario events) --------------------------------------------
  void kill();
  void restart(bool cold);
  void set_hang(bool on) noexcept { hang_ = on; }
  void set_fail(std::uint16_t status, double rate) noexcept {
    fail_status_ = status;
    fail_rate_ = rate;
  }
  void set_health(bool ok) noexcept { health_ok_ = ok; }

  Health health() const noexcept override;

  bool up() const noexcept { return up_; }
  std::uint32_t queued() const noexcept { return static_cast<std::uint32_t>(fifo_.size()); }
  std::uint32_t busy() const noexcept { return busy_; }

  struct Counters {
    std::uint64_t received = 0;   ///< calls that reached it while up
    std::uint64_t refused = 0;    ///< connection refused (down)
    std::uint64_t retries = 0;    ///< calls with x-attempt-count > 1
    std::uint64_t answered = 0;   ///< answers sent (any status)
    std::uint64_t ok = 0;         ///< 2xx answers sent
    std::uint64_t wasted = 0;     ///< work finished for a caller that had gone
    std::uint64_t crashes = 0;
    std::uint32_t max_queue = 0;
    double busy_seconds = 0;      ///< worker-seconds spent working
  };
  const Counters& counters() const noexcept { return n_; }
  /// Calls received and 2xx sent, by simulated second.
  std::vector<std::uint64_t> received_by_second, ok_by_second;

 private:
  enum Kind : std::uint32_t { kDone, kCallDown, kRestart };
  struct Job {
    Peer* from = nullptr;
    std::uint64_t cookie = 0;
    double service_ms = 0;
    bool abandoned = false;
    bool working = false;
    bool hung = false;
    TimePoint started{};
    // for a service: what it forwards
    Call call;
    TimePoint arrived{};
    TimePoint deadline = TimePoint::max();
  };
  void start(std::uint32_t i);
  void complete(std::uint32_t i, std::uint16_t status, bool no_retry);
  void bump(std::vector<std::uint64_t>& v);

  Engine& e_;
  Wire& w_;
  const BackendConfig& cfg_;
  std::uint32_t index_;
  Rng rng_;
  Slab<Job> jobs_;
  std::deque<std::uint32_t> fifo_;
  std::uint32_t busy_ = 0;
  bool up_ = true;
  bool hang_ = false;
  bool health_ok_ = true;
  std::uint16_t fail_status_ = 0;
  double fail_rate_ = 0;
  bool cold_ = false;
  TimePoint started_{};
  std::uint32_t epoch_ = 0;  ///< bumped at every kill: late events of the old life are ignored
  std::vector<Node*> down_;
  Caller* caller_ = nullptr;
  Counters n_;
};

}  // namespace levee::sim
