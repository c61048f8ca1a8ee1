#include "sim/backend.hpp"

#include <charconv>
#include <cmath>
#include <numbers>

namespace levee::sim {

namespace {
std::optional<double> parse_ms(std::string_view s) {
  double scale = 1;
  if (s.ends_with("ms")) s.remove_suffix(2);
  else if (s.ends_with("us")) { s.remove_suffix(2); scale = 0.001; }
  else if (s.ends_with("s")) { s.remove_suffix(1); scale = 1000; }
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v * scale;
}
}  // namespace

std::optional<ServiceTime> ServiceTime::parse(std::string_view spec) {
  ServiceTime t;
  std::vector<std::string_view> parts;
  while (true) {
    auto c = spec.find(':');
    parts.push_back(spec.substr(0, c));
    if (c == std::string_view::npos) break;
    spec.remove_prefix(c + 1);
  }
  const auto kind = parts[0];
  if (kind == "fixed") t.kind = Kind::Fixed;
  else if (kind == "exp") t.kind = Kind::Exp;
  else if (kind == "uniform") t.kind = Kind::Uniform;
  else if (kind == "lognormal") t.kind = Kind::Lognormal;
  else return std::nullopt;
  if (parts.size() < 2) return std::nullopt;
  auto a = parse_ms(parts[1]);
  if (!a) return std::nullopt;
  t.a_ms = *a;
  if (t.kind == Kind::Uniform) {
    if (parts.size() != 3) return std::nullopt;
    auto b = parse_ms(parts[2]);
    if (!b || *b < t.a_ms) return std::nullopt;
    t.b = *b;
  } else if (t.kind == Kind::Lognormal) {
    t.b = 0.5;
    if (parts.size() == 3) {
      double v = 0;
      auto [p, ec] = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), v);
      if (ec != std::errc() || v <= 0) return std::nullopt;
      t.b = v;
    }
  } else if (parts.size() != 2) {
    return std::nullopt;
  }
  return t;
}

double ServiceTime::draw_ms(Rng& r) const {
  switch (kind) {
    case Kind::Fixed: return a_ms;
    case Kind::Exp: return -std::log(1.0 - r.uniform()) * a_ms;
    case Kind::Uniform: return a_ms + (b - a_ms) * r.uniform();
    case Kind::Lognormal: {
      // Box-Muller; mu chosen so that the mean is a_ms.
      const double u1 = 1.0 - r.uniform(), u2 = r.uniform();
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      const double mu = std::log(a_ms) - b * b / 2;
      return std::exp(mu + b * z);
    }
  }
  return a_ms;
}

double ServiceTime::mean_ms() const { return kind == Kind::Uniform ? (a_ms + b) / 2 : a_ms; }

Backend::Backend(Engine& e, Wire& w, const BackendConfig& cfg, std::uint32_t index)
    : e_(e), w_(w), cfg_(cfg), index_(index), rng_(e.rng.split()) {}

void Backend::connect(std::vector<Node*> downstream_targets, Caller* caller) {
  down_ = std::move(downstream_targets);
  caller_ = caller;
}

void Backend::bump(std::vector<std::uint64_t>& v) {
  const auto s = static_cast<std::size_t>(core::to_seconds(e_.now().time_since_epoch()));
  if (v.size() <= s) v.resize(s + 1, 0);
  ++v[s];
}

std::uint64_t Backend::receive(const Call& c, Peer* from, std::uint64_t cookie) {
  bump(received_by_second);
  if (!up_) {
    ++n_.refused;
    w_.send_reply(from, cookie, Reply::no_head(Reply::Kind::ConnectFailed));
    return 0;
  }
  ++n_.received;
  if (c.attempt > 1) ++n_.retries;
  const std::uint32_t i = jobs_.alloc();
  Job& j = jobs_[i];
  j.from = from;
  j.cookie = cookie;
  j.call = c;
  j.arrived = e_.now();
  if (c.timeout_ms >= 0) j.deadline = e_.now() + std::chrono::milliseconds(c.timeout_ms);
  if (hang_) {
    j.hung = true;  // never answered; the caller's give-up frees it
    return pack(i, jobs_.gen(i));
  }
  // Drawn on arrival, as levee-backend does, cold-start slowdown included.
  double ms = cfg_.service.draw_ms(rng_);
  if (cold_ && cfg_.warmup_seconds > 0) {
    const double age = core::to_seconds(e_.now() - started_);
    const double cold = std::max(0.0, 1.0 - age / cfg_.warmup_seconds);
    double load = 1.0;
    if (cfg_.thrash && cfg_.workers > 0) {
      const double f = static_cast<double>(busy_ + 1) / cfg_.workers;
      load = f * f;
    }
    ms *= 1.0 + (cfg_.warmup_factor - 1.0) * cold * load;
  }
  j.service_ms = ms;
  if (cfg_.workers == 0 || (busy_ < cfg_.workers && fifo_.empty())) {
    start(i);
  } else {
    fifo_.push_back(i);
    n_.max_queue = std::max(n_.max_queue, static_cast<std::uint32_t>(fifo_.size()));
    if (cfg_.crash_queue > 0 && fifo_.size() > cfg_.crash_queue) {
      const std::uint64_t t = pack(i, jobs_.gen(i));
      ++n_.crashes;
      kill();
      e_.after(cfg_.restart_after, this, kRestart, 0, epoch_);
      return t;
    }
  }
  return pack(i, jobs_.gen(i));
}

void Backend::start(std::uint32_t i) {
  Job& j = jobs_[i];
  ++busy_;
  j.working = true;
  j.started = e_.now();
  const auto d = core::from_seconds(j.service_ms / 1000.0);
  e_.after(d, this, cfg_.downstream ? kCallDown : kDone, i, jobs_.gen(i));
}

void Backend::abandon(std::uint64_t ticket) {
  const std::uint32_t i = slot_of(ticket);
  if (!jobs_.live(i, gen_of(ticket))) return;
  Job& j = jobs_[i];
  j.abandoned = true;
  if (j.hung) jobs_.release(i);
}

void Backend::fire(std::uint32_t kind, std::uint32_t i, std::uint32_t gen) {
  if (kind == kRestart) {
    if (gen == epoch_ && !up_) restart(true);
    return;
  }
  if (!jobs_.live(i, gen)) return;
  if (kind == kDone) {
    const bool fail = fail_status_ != 0 && rng_.uniform() < fail_rate_;
    complete(i, fail ? fail_status_ : 200, false);
    return;
  }
  // kCallDown: the service's own work is done; now it calls the next hop,
  // holding its worker until the answer comes.
  Job& j = jobs_[i];
  if (down_.empty() || caller_ == nullptr) {
    complete(i, 200, false);
    return;
  }
  CallSpec s;
  s.id = j.call.id;
  s.criticality = j.call.criticality;
  s.crit = core::parse_criticality(j.call.criticality).value_or(core::Criticality::Critical);
  s.tenant = j.call.tenant;
  s.start = e_.now();
  s.deadline = std::min(j.deadline, e_.now() + cfg_.downstream->timeout);
  s.client = index_;
  s.target = down_[index_ % down_.size()];
  caller_->start(s, this, pack(i, gen));
}

void Backend::on_outcome(std::uint64_t cookie, const Outcome& o) {
  const std::uint32_t i = slot_of(cookie);
  if (!jobs_.live(i, gen_of(cookie))) return;
  std::uint16_t status = 200;
  switch (o.kind) {
    case Outcome::Kind::Ok: status = fail_status_ != 0 && rng_.uniform() < fail_rate_ ? fail_status_ : 200; break;
    case Outcome::Kind::Rejected:
    case Outcome::Kind::Failed: status = o.status ? o.status : 502; break;
    case Outcome::Kind::Timeout: status = 504; break;
    case Outcome::Kind::Error: status = 502; break;
  }
  complete(i, status, false);
}

void Backend::complete(std::uint32_t i, std::uint16_t status, bool no_retry) {
  Job& j = jobs_[i];
  const double util = cfg_.workers ? static_cast<double>(busy_) / cfg_.workers : 0.0;
  if (j.working) {
    --busy_;
    n_.busy_seconds += core::to_seconds(e_.now() - j.started);
  }
  Reply r;
  r.status = status;
  r.no_retry = no_retry;
  if (cfg_.orca) {
    r.has_load = true;
    r.utilization = util;
    r.cost = j.service_ms / 1000.0 * cfg_.cost_factor;
  }
  ++n_.answered;
  if (status >= 200 && status < 300) {
    ++n_.ok;
    bump(ok_by_second);
  }
  if (j.abandoned) ++n_.wasted;
  else w_.send_reply(j.from, j.cookie, r);
  jobs_.release(i);
  // The worker passes straight to the next in line.
  while (!fifo_.empty() && (cfg_.workers == 0 || busy_ < cfg_.workers)) {
    const std::uint32_t next = fifo_.front();
    fifo_.pop_front();
    start(next);
  }
}

void Backend::kill() {
  jobs_.each([&](std::uint32_t i) {
    Job& j = jobs_[i];
    if (!j.abandoned) w_.send_reply(j.from, j.cookie, Reply::no_head(Reply::Kind::Reset));
    jobs_.release(i);
  });
  fifo_.clear();
  busy_ = 0;
  up_ = false;
  ++epoch_;
}

void Backend::restart(bool cold) {
  if (up_) return;
  up_ = true;
  started_ = e_.now();
  cold_ = cold && cfg_.warmup_seconds > 0;
}

Node::Health Backend::health() const noexcept {
  if (!up_) return Health::Refused;
  if (hang_) return Health::Hung;
  return health_ok_ ? Health::Ok : Health::Failed;
}

}  // namespace levee::sim
