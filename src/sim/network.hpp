// What travels between simulated hops, and the network that carries it.
//
// A Call is a request as it is on the wire: the headers levee reads
// (criticality, tenant, remaining deadline, attempt count), nothing else.
// A Reply is what comes back: a status with the signals levee and clients
// act on (Retry-After, "don't retry", the rejection reason, ORCA load), or
// no response head at all (refused connection, reset).
//
// A Node receives calls; a Peer receives replies. The Wire delays each
// message by the network's one-way latency. A caller that gives up tells
// the callee at once (abandon): a naive backend ignores it and works on,
// levee frees the request's permit, as the real ones do.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "sim/engine.hpp"

namespace levee::sim {

struct Call {
  std::uint64_t id = 0;             ///< the client request it belongs to (for tracing)
  std::string_view criticality;     ///< x-criticality, empty: absent
  std::string_view tenant;          ///< x-tenant-id, empty: absent
  std::int64_t timeout_ms = -1;     ///< x-request-timeout-ms, -1: absent
  std::uint32_t attempt = 1;        ///< x-attempt-count
};

struct Reply {
  enum class Kind : std::uint8_t { Answer, ConnectFailed, Reset };
  Kind kind = Kind::Answer;
  std::uint16_t status = 200;
  bool no_retry = false;             ///< x-levee-no-retry
  std::uint32_t retry_after_s = 0;   ///< Retry-After, 0: absent
  core::Reason reason = core::Reason::None;  ///< x-levee-reject / x-levee-error
  bool has_load = false;             ///< endpoint-load-metrics present
  double cost = 0;                   ///< request_cost.cpu, CPU-seconds
  double utilization = 0;            ///< application_utilization

  static Reply status_only(std::uint16_t s) {
    Reply r;
    r.status = s;
    return r;
  }
  static Reply no_head(Kind k) {
    Reply r;
    r.kind = k;
    r.status = 0;
    return r;
  }
};

class Peer {
 public:
  /// The callee took the call: `ticket` names it for abandon(). False: the
  /// caller gave up while the call was on its way (the wire abandons it).
  virtual bool on_accepted(std::uint64_t cookie, std::uint64_t ticket) = 0;
  virtual void on_reply(std::uint64_t cookie, const Reply& r) = 0;

 protected:
  ~Peer() = default;
};

class Node {
 public:
  /// What an active health check sees.
  enum class Health : std::uint8_t { Ok, Failed, Refused, Hung };
  virtual Health health() const noexcept { return Health::Ok; }
  /// A call arrives now. Returns a ticket for abandon().
  virtual std::uint64_t receive(const Call& c, Peer* from, std::uint64_t cookie) = 0;
  /// The caller went away (the connection was closed).
  virtual void abandon(std::uint64_t ticket) = 0;

 protected:
  ~Node() = default;
};

struct NetworkConfig {
  Duration delay = std::chrono::microseconds(50);  ///< one way, per hop
  Duration jitter{};                               ///< mean of an exponential extra delay
};

/// Carries calls and replies with the network's delay.
class Wire final : public Handler {
 public:
  Wire(Engine& e, NetworkConfig n) : e_(e), net_(n), rng_(e.rng.split()) {}

  void send_call(Node* to, const Call& c, Peer* from, std::uint64_t cookie) {
    const std::uint32_t i = msgs_.alloc();
    Msg& m = msgs_[i];
    m.node = to;
    m.peer = from;
    m.cookie = cookie;
    m.call = c;
    m.is_call = true;
    e_.after(hop(), this, 0, i, msgs_.gen(i));
  }
  void send_reply(Peer* to, std::uint64_t cookie, const Reply& r) {
    const std::uint32_t i = msgs_.alloc();
    Msg& m = msgs_[i];
    m.peer = to;
    m.cookie = cookie;
    m.reply = r;
    m.is_call = false;
    e_.after(hop(), this, 0, i, msgs_.gen(i));
  }
  Duration hop() {
    if (net_.jitter <= Duration::zero()) return net_.delay;
    const double u = rng_.uniform();
    return net_.delay + core::from_seconds(-std::log(1.0 - u) * core::to_seconds(net_.jitter));
  }
  const NetworkConfig& config() const noexcept { return net_; }

  void fire(std::uint32_t, std::uint32_t slot, std::uint32_t gen) override {
    if (!msgs_.live(slot, gen)) return;
    const Msg m = msgs_[slot];
    msgs_.release(slot);
    if (m.is_call) {
      const std::uint64_t t = m.node->receive(m.call, m.peer, m.cookie);
      if (!m.peer->on_accepted(m.cookie, t)) m.node->abandon(t);
    } else {
      m.peer->on_reply(m.cookie, m.reply);
    }
  }

 private:
  struct Msg {
    Node* node = nullptr;
    Peer* peer = nullptr;
    std::uint64_t cookie = 0;
    Call call;
    Reply reply;
    bool is_call = true;
  };
  Engine& e_;
  NetworkConfig net_;
  Rng rng_;
  Slab<Msg> msgs_;
};

/// Packs a slot and its generation into one cookie or ticket.
constexpr std::uint64_t pack(std::uint32_t slot, std::uint32_t gen) noexcept {
  return (static_cast<std::uint64_t>(gen) << 32) | slot;
}
constexpr std::uint32_t slot_of(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(v & 0xffffffffu); }
constexpr std::uint32_t gen_of(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(v >> 32); }

}  // namespace levee::sim
