#include "core/concurrency_limit.hpp"

namespace levee::core {

ConcurrencyLimit::ConcurrencyLimit(ConcurrencyLimitConfig cfg) noexcept : cfg_(cfg) {
  if (cfg_.adaptive) {
    auto& a = cfg_.adaptive_cfg;
    a.min = std::max<std::uint32_t>(1, a.min);
    a.max = std::max(a.min, a.max);
    a.min_samples = std::max<std::uint32_t>(1, a.min_samples);
    limit_ = std::clamp(a.initial, a.min, a.max);
  } else {
    limit_ = std::max<std::uint32_t>(1, cfg_.static_limit);
  }
}

std::uint32_t ConcurrencyLimit::on_start(TimePoint now, std::uint32_t kind) noexcept {
  if (!cfg_.adaptive) return 0;
  std::uint32_t probe = 0;
  if (probing_ && !probe_closed_) {
    ++probe_started_;
    const auto& a = cfg_.adaptive_cfg;
    if (now - probe_begin_ >= a.min_window && probe_started_ >= a.min_samples) probe_closed_ = true;
    probe = probe_id_;
  }
  return (probe << kKindBits) | kind_of(kind);
}

void ConcurrencyLimit::start_probe(TimePoint now) noexcept {
  probing_ = true;
  // 0 means "no probe"; the number must leave room for the kind in a tag.
  if (++probe_id_ >= (1u << (32 - kKindBits))) probe_id_ = 1;
  probe_begin_ = now;
  probe_closed_ = false;
  probe_started_ = 0;
  probe_done_ = 0;
  probe_lost_ = 0;
  probe_kind_sum_.fill(0);
  probe_kind_done_.fill(0);
}

void ConcurrencyLimit::finish_probe(TimePoint now) noexcept {
  probing_ = false;
  last_probe_ = now;
  if (probe_done_ >= std::max<std::uint32_t>(1, cfg_.adaptive_cfg.min_samples / 2)) {
    const double avg = sum(probe_kind_sum_) / probe_done_;
    noload_ = probed_ ? 0.5 * noload_ + 0.5 * avg : avg;
    probed_ = true;
    // Each kind on its own (kind 0, "not told", is the mean of all),
    // weighed by how many samples it had: three must not count as forty.
    for (std::uint32_t k = 1; k < kKinds; ++k) {
      if (probe_kind_done_[k] < kKindMinSamples) continue;
      const double n = probe_kind_done_[k];
      const double w = ((measured_ >> k) & 1u) ? 0.5 * kind_weight_[k] : 0.0;
      kind_noload_[k] = (w * kind_noload_[k] + probe_kind_sum_[k]) / (w + n);
      kind_weight_[k] = w + n;
      kind_probe_[k] = probe_id_;
    }
  }
  update_measured();
  // Restart the regular window: what ran during the probe is not typical.
  reset_window(now);
}

void ConcurrencyLimit::reset_window(TimePoint now) noexcept {
  window_start_ = now;
  samples_ = 0;
  kind_samples_.fill(0);
  kind_rtt_.fill(0);
  max_inflight_ = 0;
  drops_ = 0;
}

void ConcurrencyLimit::on_sample(TimePoint now, Duration rtt, std::uint32_t inflight, bool dropped,
                                 std::uint32_t tag) noexcept {
  if (!cfg_.adaptive) return;
  const auto& a = cfg_.adaptive_cfg;
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
    // The first probe comes early: the start-up estimate is the weakest.
    last_probe_ = now - a.probe_interval + a.probe_interval / 5;
  }
  if (probing_) {
    if (probe_of(tag) != 0 && probe_of(tag) == probe_id_) {
      ++probe_done_;
      probe_kind_sum_[kind_of(tag)] += to_seconds(rtt);
      ++probe_kind_done_[kind_of(tag)];
    }
    maybe_finish_probe(now);
    return;
  }
  ++samples_;
  ++kind_samples_[kind_of(tag)];
  kind_rtt_[kind_of(tag)] += to_seconds(rtt);
  max_inflight_ = std::max(max_inflight_, inflight);
  if (dropped) ++drops_;
  if (now - window_start_ < a.min_window || samples_ < a.min_samples) return;
  // Long enough; close it once enough of it can be compared with a
  // no-load latency (a drop is news at once; a window that never gets
  // there closes after kMaxWindows, and holds).
  if (drops_ > 0 || comparable_samples() >= kMinMeasured || now - window_start_ >= a.min_window * kMaxWindows)
    end_window(now);
}

void ConcurrencyLimit::on_lost(TimePoint now, std::uint32_t tag) noexcept {
  if (!cfg_.adaptive || !probing_) return;
  if (probe_of(tag) != 0 && probe_of(tag) == probe_id_) ++probe_lost_;
  maybe_finish_probe(now);
}

void ConcurrencyLimit::maybe_finish_probe(TimePoint now) noexcept {
  const bool all_back = probe_closed_ && probe_done_ + probe_lost_ >= probe_started_;
  // A request that never comes back at all (a permit held past its
  // response timeout) must not hold the probe open.
  const bool too_long = now - probe_begin_ >= cfg_.adaptive_cfg.min_window * kMaxWindows;
  if (all_back || too_long) finish_probe(now);
}

void ConcurrencyLimit::update_measured() noexcept {
  measured_ = 0;
  for (std::uint32_t k = 1; k < kKinds; ++k)
    if (kind_noload_[k] > 0 && ((probe_id_ - kind_probe_[k]) & kProbeMask) <= kKindFresh) measured_ |= 1u << k;
}

std::uint32_t ConcurrencyLimit::comparable_samples() const noexcept {
  if (measured_ == 0) return samples_;
  std::uint32_t n = kind_samples_[0];
  for (std::uint32_t k = 1; k < kKinds; ++k)
    if ((measured_ >> k) & 1u) n += kind_samples_[k];
  return n;
}

double ConcurrencyLimit::window_ratio(bool noload) const noexcept {
  const double tol = to_seconds(cfg_.adaptive_cfg.rtt_tolerance);
  const auto base = [&](double x) { return noload ? x + tol : tol; };
  double rtt = 0;
  double floor = 0;
  if (measured_ == 0) {
    // No kind measured on its own (before the first probe, or every
    // request of kind 0): all of them against the mean of all.
    rtt = sum(kind_rtt_);
    floor = samples_ * base(noload_);
  } else {
    // Kind 0 against the mean of all; the others against their own, and
    // only those a probe measured: a kind the halved limit never admitted
    // (the lowest lane, under load) has nothing to compare with, while a
    // queue inside the backend delays every kind and shows in the others.
    rtt = kind_rtt_[0];
    floor = kind_samples_[0] * base(noload_);
    for (std::uint32_t k = 1; k < kKinds; ++k) {
      if (!((measured_ >> k) & 1u)) continue;
      rtt += kind_rtt_[k];
      floor += kind_samples_[k] * base(kind_noload_[k]);
    }
  }
  return floor > 0 && std::isfinite(floor) ? rtt / floor : 0.0;
}

void ConcurrencyLimit::end_window(TimePoint now) noexcept {
  const auto& a = cfg_.adaptive_cfg;
  const double avg = sum(kind_rtt_) / samples_;
  // Before the first probe, the first window (at the small initial limit)
  // is the best no-load view there is.
  const bool first = smoothed_ <= 0;
  if (first && !probed_) noload_ = avg;
  // The window's latency over what the same requests take with no queue:
  // each kind against its own no-load latency, so that a window and a
  // probe that admitted other kinds in other proportions still compare.
  const double ratio = window_ratio(true);  // 0: nothing comparable (hold)
  // Within the tolerance whatever the no-load latency is: no probe could
  // make this window read as a queue. Only when every request in it can be
  // compared (a kind no probe measured becomes comparable only by a probe).
  const double within = window_ratio(false);
  const bool below_tolerance = within > 0 && within <= 1.0 && comparable_samples() == samples_;
  if (below_tolerance && now - last_probe_ >= a.probe_interval) {
    // A probe is due, and it would halve the limit and queue requests to
    // learn a no-load latency that changes no decision here. This window
    // stands in for it: its latency has at most the tolerance of queue in
    // it, as the halved limit's would, and refreshes the estimates later
    // windows above the tolerance are read against. (Kept stale, an
    // estimate from a slower past would hide a queue once latency rose;
    // and a probe that started the moment it rose would measure the queue
    // itself while the limit is still far above the backend's size.)
    noload_ = probed_ ? 0.5 * noload_ + 0.5 * avg : avg;
    probed_ = true;
    last_probe_ = now;  // the next is due a probe_interval from here
    for (std::uint32_t k = 1; k < kKinds; ++k)
      if (((measured_ >> k) & 1u) && kind_samples_[k] >= kKindMinSamples)
        kind_noload_[k] = 0.5 * kind_noload_[k] + 0.5 * kind_rtt_[k] / kind_samples_[k];
  }
  const std::uint32_t used = max_inflight_;
  const std::uint32_t drops = drops_;
  reset_window(now);

  if (ratio > 0 && first) {
    smoothed_ = ratio;
  } else if (ratio > 0) {
    const double dev = ratio - smoothed_;
    variance_ = 0.8 * variance_ + 0.2 * dev * dev;
    smoothed_ = 0.5 * smoothed_ + 0.5 * ratio;
  }

  const double l = limit_;
  double next = l;
  if (drops > 0) {
    // Overload answers or timeouts from the backend: back off multiplicatively.
    next = l * 0.9;
  } else if (ratio > 0 && smoothed_ > 0) {
    const double r = smoothed_;  // RTT / floor, smoothed
    const double queue = r > 1.0 ? l * (1.0 - 1.0 / r) : 0.0;
    const double noise = std::sqrt(variance_) / r;  // relative spread of windows
    const double lo = std::max(1.0, a.alpha * l);
    const double hi = std::max({3.0, a.beta * l, 3.0 * noise * l});
    if (queue > hi) {
      // l * floor/rtt estimates the backend's own concurrency; keep the
      // middle of the target queue on top of it. Move half way to damp noise.
      const double target = l / r + (lo + hi) / 2.0;
      next = l + (target - l) * 0.5;
    } else if (queue < lo && used >= static_cast<std::uint32_t>(l * 0.8)) {
      next = l + std::max(1.0, std::sqrt(l));
    }
  }
  limit_ = static_cast<std::uint32_t>(
      std::clamp(std::round(next), static_cast<double>(a.min), static_cast<double>(a.max)));

  // A probe is due, and the window above did not stand in for it: its
  // latency is above the tolerance (or not all of it comparable).
  if (now - last_probe_ >= a.probe_interval && !below_tolerance) start_probe(now);
}

}  // namespace levee::core
