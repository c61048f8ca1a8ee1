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

std::uint32_t ConcurrencyLimit::on_start(TimePoint now) noexcept {
  if (!cfg_.adaptive || !probing_ || probe_closed_) return 0;
  ++probe_started_;
  const auto& a = cfg_.adaptive_cfg;
  if (now - probe_begin_ >= a.min_window && probe_started_ >= a.min_samples) probe_closed_ = true;
  return probe_id_;
}

void ConcurrencyLimit::start_probe(TimePoint now) noexcept {
  probing_ = true;
  if (++probe_id_ == 0) probe_id_ = 1;  // 0 means "no probe"
  probe_begin_ = now;
  probe_closed_ = false;
  probe_started_ = 0;
  probe_done_ = 0;
  probe_lost_ = 0;
  probe_sum_ = 0;
}

void ConcurrencyLimit::finish_probe(TimePoint now) noexcept {
  probing_ = false;
  last_probe_ = now;
  if (probe_done_ >= std::max<std::uint32_t>(1, cfg_.adaptive_cfg.min_samples / 2)) {
    const double avg = probe_sum_ / probe_done_;
    noload_ = probed_ ? 0.5 * noload_ + 0.5 * avg : avg;
    probed_ = true;
  }
  // Restart the regular window: what ran during the probe is not typical.
  window_start_ = now;
  rtt_sum_ = 0;
  samples_ = 0;
  max_inflight_ = 0;
  drops_ = 0;
}

void ConcurrencyLimit::on_sample(TimePoint now, Duration rtt, std::uint32_t inflight, bool dropped,
                                 std::uint32_t probe) noexcept {
  if (!cfg_.adaptive) return;
  const auto& a = cfg_.adaptive_cfg;
  if (!window_open_) {
    window_open_ = true;
    window_start_ = now;
    // The first probe comes early: the start-up estimate is the weakest.
    last_probe_ = now - a.probe_interval + a.probe_interval / 5;
  }
  if (probing_) {
    if (probe != 0 && probe == probe_id_) {
      probe_sum_ += to_seconds(rtt);
      ++probe_done_;
    }
    maybe_finish_probe(now);
    return;
  }
  rtt_sum_ += to_seconds(rtt);
  ++samples_;
  max_inflight_ = std::max(max_inflight_, inflight);
  if (dropped) ++drops_;
  if (now - window_start_ >= a.min_window && samples_ >= a.min_samples) end_window(now);
}

void ConcurrencyLimit::on_lost(TimePoint now, std::uint32_t probe) noexcept {
  if (!cfg_.adaptive || !probing_) return;
  if (probe != 0 && probe == probe_id_) ++probe_lost_;
  maybe_finish_probe(now);
}

void ConcurrencyLimit::maybe_finish_probe(TimePoint now) noexcept {
  const bool all_back = probe_closed_ && probe_done_ + probe_lost_ >= probe_started_;
  // A request that never comes back at all (a permit held past its
  // response timeout) must not hold the probe open.
  const bool too_long = now - probe_begin_ >= cfg_.adaptive_cfg.min_window * 20;
  if (all_back || too_long) finish_probe(now);
}

void ConcurrencyLimit::end_window(TimePoint now) noexcept {
  const auto& a = cfg_.adaptive_cfg;
  const double avg = rtt_sum_ / samples_;
  const std::uint32_t used = max_inflight_;
  const std::uint32_t drops = drops_;
  window_start_ = now;
  rtt_sum_ = 0;
  samples_ = 0;
  max_inflight_ = 0;
  drops_ = 0;

  if (smoothed_ > 0) {
    const double dev = avg - smoothed_;
    variance_ = 0.8 * variance_ + 0.2 * dev * dev;
    smoothed_ = 0.5 * smoothed_ + 0.5 * avg;
  } else {
    smoothed_ = avg;
    // Before the first probe, the first window (at the small initial limit)
    // is the best no-load view there is.
    if (!probed_) noload_ = avg;
  }

  const double l = limit_;
  double next = l;
  if (drops > 0) {
    // Overload answers or timeouts from the backend: back off multiplicatively.
    next = l * 0.9;
  } else if (smoothed_ > 0 && noload_ > 0) {
    const double rtt = smoothed_;
    const double floor = noload_ + to_seconds(a.rtt_tolerance);
    const double queue = rtt > floor ? l * (1.0 - floor / rtt) : 0.0;
    const double noise = std::sqrt(variance_) / rtt;  // relative spread of averages
    const double lo = std::max(1.0, a.alpha * l);
    const double hi = std::max({3.0, a.beta * l, 3.0 * noise * l});
    if (queue > hi) {
      // l * noload/rtt estimates the backend's own concurrency; keep the
      // middle of the target queue on top of it. Move half way to damp noise.
      const double target = l * floor / rtt + (lo + hi) / 2.0;
      next = l + (target - l) * 0.5;
    } else if (queue < lo && used >= static_cast<std::uint32_t>(l * 0.8)) {
      next = l + std::max(1.0, std::sqrt(l));
    }
  }
  limit_ = static_cast<std::uint32_t>(
      std::clamp(std::round(next), static_cast<double>(a.min), static_cast<double>(a.max)));

  if (now - last_probe_ >= a.probe_interval) start_probe(now);
}

}  // namespace levee::core
