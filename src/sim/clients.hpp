// Clients: open-loop arrivals (constant, Poisson or a trace file), a mix of
// classes (criticality, tenant, deadline), and how a client behaves when it
// is refused: retries with exponential backoff, with or without a retry
// budget, honouring Retry-After and "don't retry" or not, and client-side
// adaptive throttling (the SRE book's formula, the same core class levee
// uses as the cluster's client).
//
// The per-request behaviour is levee-loadgen's, step for step (so the
// simulator can be checked against real runs): a request is sent at its
// scheduled time whatever happened before; the client gives up at its
// deadline (closing the connection); a 429/503 or any 5xx is retried while
// attempts and time remain; a reset connection is retried, a refused one
// is not (unless retry_connect_errors); x-request-timeout-ms carries the
// remaining deadline in whole milliseconds.
//
// Caller is that behaviour on its own, so a service in a stack of hops
// (a backend that calls further down) retries the same way a client does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/retry_budget.hpp"
#include "core/throttle.hpp"
#include "sim/network.hpp"
#include "sim/output.hpp"

namespace levee::sim {

struct CallerPolicy {
  std::uint32_t retries = 0;  ///< retries after the first attempt
  Duration backoff = std::chrono::milliseconds(50);
  bool honor_retry_after = false;
  bool honor_no_retry = false;
  bool retry_connect_errors = false;  ///< levee-loadgen does not retry a refused connection
  std::optional<core::RetryBudgetConfig> budget;    ///< client-side retry budget
  std::optional<core::ThrottleConfig> throttle;     ///< client-side adaptive throttling
};

/// How a call ended, as the caller saw it.
struct Outcome {
  enum class Kind : std::uint8_t { Ok, Rejected, Failed, Timeout, Error };
  Kind kind = Kind::Ok;
  std::uint16_t status = 0;
  std::string reason;  ///< x-levee-reject value, else "status_N"
  bool no_retry = false;
  bool first_attempt_sent = false;
  std::uint32_t attempts = 0;
  TimePoint first_refusal{};  ///< the first non-2xx answer, when there was one
  bool refused = false;
};

class CallOwner {
 public:
  /// An attempt is about to be sent (attempt 1 = the first).
  virtual void on_send(std::uint64_t cookie, std::uint32_t attempt) = 0;
  virtual void on_outcome(std::uint64_t cookie, const Outcome& o) = 0;

 protected:
  ~CallOwner() = default;
};

/// What one call is: its headers, deadline, and whom it is for.
struct CallSpec {
  std::uint64_t id = 0;
  std::string_view criticality;
  core::Criticality crit = core::Criticality::Critical;  ///< for the client-side throttle
  std::string_view tenant;
  TimePoint start{};
  TimePoint deadline{};
  std::uint32_t client = 0;  ///< whose throttle and budget
  Node* target = nullptr;
};

/// A caller with a retry policy and per-client state (throttle, budget).
class Caller final : public Handler, public Peer {
 public:
  Caller(Engine& e, Wire& w, CallerPolicy p, std::uint32_t clients);

  void start(const CallSpec& s, CallOwner* owner, std::uint64_t cookie);

  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;
  bool on_accepted(std::uint64_t cookie, std::uint64_t ticket) override;
  void on_reply(std::uint64_t cookie, const Reply& r) override;

  std::uint64_t throttled() const noexcept { return throttled_; }
  std::uint64_t budget_denied() const noexcept { return budget_denied_; }

 private:
  enum Kind : std::uint32_t { kSend, kDeadline };
  enum class State : std::uint8_t { Waiting, Backoff };
  struct Pending {
    CallSpec spec;
    CallOwner* owner = nullptr;
    std::uint64_t owner_cookie = 0;
    std::uint32_t attempt = 0;
    State state = State::Waiting;
    bool after_answer = false;  ///< the backoff follows an answer (not a broken connection)
    std::uint64_t ticket = 0;
    bool accepted = false;
    Outcome out;
  };
  void send(std::uint32_t slot);
  void backoff(std::uint32_t slot, double retry_after_s, bool after_answer);
  void finish(std::uint32_t slot, Outcome::Kind k);
  core::AdaptiveThrottle* throttle(std::uint32_t client);
  core::RetryBudget* budget(std::uint32_t client);

  Engine& e_;
  Wire& w_;
  CallerPolicy p_;
  Rng rng_;
  Slab<Pending> pending_;
  std::vector<std::unique_ptr<core::AdaptiveThrottle>> throttles_;
  std::vector<std::unique_ptr<core::RetryBudget>> budgets_;
  std::uint64_t throttled_ = 0, budget_denied_ = 0;
};

struct RequestClass {
  std::string name;
  double weight = 1;
  std::string criticality;  ///< empty: no header
  std::string tenant;       ///< empty: no header
  Duration deadline = std::chrono::seconds(1);
};

struct Phase {
  Duration length;
  double rate;  ///< requests per second, all clients of the group together
};

struct ClientGroupConfig {
  std::string name;
  std::uint32_t count = 0;  ///< clients, each sticking to one instance of the target; 0: one per instance
  std::vector<Phase> phases;
  bool poisson = true;
  std::vector<std::pair<double, std::uint32_t>> trace;  ///< arrival seconds and class, instead of phases
  std::vector<RequestClass> classes;
  CallerPolicy policy;
};

/// A population of clients sending to the instances of one target group.
class ClientGroup final : public Handler, public CallOwner {
 public:
  ClientGroup(Engine& e, Wire& w, ClientGroupConfig cfg, std::vector<Node*> targets, Duration warmup);

  void start();
  /// Scales every phase's rate from now on (scenario events).
  void scale_rate(double f) noexcept { scale_ = f; }
  TimePoint end() const noexcept { return end_; }

  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;
  void on_send(std::uint64_t cookie, std::uint32_t attempt) override;
  void on_outcome(std::uint64_t cookie, const Outcome& o) override;

  const ClientGroupConfig& config() const noexcept { return cfg_; }
  std::vector<ClassStats>& classes() noexcept { return stats_; }
  std::vector<Second>& seconds() noexcept { return seconds_; }
  Timeline timeline;  ///< kept when its interval is set (all classes, counted requests)
  std::uint64_t offered() const noexcept { return offered_; }
  const Caller& caller() const noexcept { return caller_; }

 private:
  struct Req {
    std::uint32_t cls = 0;
    TimePoint start{};
    bool counted = false;
  };
  bool next_arrival(TimePoint& t, std::uint32_t& cls);
  std::uint32_t pick_class();
  Second& second(TimePoint t);

  Engine& e_;
  ClientGroupConfig cfg_;
  std::vector<Node*> targets_;
  Duration warmup_;
  Caller caller_;
  Rng rng_;
  double scale_ = 1.0;
  double total_weight_ = 0;
  // arrival process
  std::size_t phase_ = 0;
  TimePoint phase_start_{};
  std::uint64_t k_ = 0;
  TimePoint last_{};
  std::size_t trace_i_ = 0;
  TimePoint end_{};
  TimePoint next_{};
  std::uint32_t next_cls_ = 0;
  std::uint64_t next_id_ = 1;
  std::uint64_t offered_ = 0;
  Slab<Req> reqs_;
  std::vector<ClassStats> stats_;
  ClassStats warm_;  ///< requests in the warm-up: counted nowhere
  std::vector<Second> seconds_;
};

/// The reason string levee-loadgen records for a non-2xx answer.
std::string reason_of(const Reply& r);

}  // namespace levee::sim
