// The cluster's concurrency limit: how many requests levee lets be in flight
// to a cluster at once. Static, or adaptive from observed latency.
//
// The adaptive limit is a Vegas-style controller. Its reasoning: for a
// backend with N workers and service time S, requests in flight L <= N see
// latency S, and L > N see S * L / N because the excess queues inside the
// backend. So with RTT_noload the latency with no backend queue and RTT the
// latency observed at limit L, the backend's own queue is
//     queue = L * (1 - RTT_noload / RTT)         (= L - N when L > N)
// and L * RTT_noload / RTT estimates N. The controller works on the ratio
// RTT / (RTT_noload + tolerance), smoothed across windows. Each measurement
// window (at least `min_window` long and `min_samples` samples) it:
//   - if queue > beta*L: moves half way to N + headroom (the estimate);
//   - if queue < alpha*L and the limit was actually used: grows by sqrt(L);
//   - otherwise holds.
// The tolerance (default 1 ms) keeps latency growth below it from counting
// as a queue: for very fast backends it is the proxy's own scheduling.
// Service times vary, so window averages are noisy; noise must not read as
// queueing (which would pin the limit low and starve the backend). The
// controller tracks the spread of window ratios and never decreases on a
// queue estimate within three standard errors of zero: it errs towards a
// slightly longer backend queue rather than idle backend workers.
// Averages over a window, not single samples, and smoothing across windows
// make the ratio robust to service-time variance.
//
// RTT_noload comes from probes: every `probe_interval` the limit is halved,
// which drains the backend's own queue, and the mean latency of the
// requests started during the probe is the no-load latency (the idea of
// BBR's ProbeRTT; about 1% of capacity at the defaults). A probe that is
// due waits while the windows' latency stays within the tolerance (and
// every request in them has a no-load latency to compare with): the
// ratio is then at most 1 whatever the no-load latency, so a probe would
// change no decision. Such a window stands in for the probe instead: it
// refreshes the no-load latencies as the probe would have (it holds at
// most the tolerance of queue), and the next probe is due a
// probe_interval later, so that they are never staler than with probes.
// The probe
// would queue requests (live, against a backend answering in
// microseconds, 1.3-1.9% of all requests waited in the queue, a quarter
// of a millisecond on average: where a p99 sits). The probe waits
// for every request it started to complete: closing it on a sample count
// would over-represent short requests and bias the estimate low. Which
// requests those are is told, not inferred: on_start() returns a tag that
// holds the probe's number, and the sample brings it back (a start worked
// out as `now - rtt` misses a request whose latency is measured from its
// send, not its grant, and kept every probe open until its time limit, 20
// windows). Until the first probe the first window (at the small initial
// limit) stands in. A running minimum over windows would be biased low by
// lucky windows, and would never be refreshed if the backend's base
// latency rose under sustained overload. Gradient-style limits that track a
// long-term average RTT instead drift upwards exactly when overload is
// sustained, which is levee's normal case.
//
// A probe and a window must compare the same kinds of request. At half the
// limit the queue serves its lanes in order (critical first, over-quota
// tenants last), so a probe sees mostly the upper lanes' requests; when
// the lanes' requests cost different amounts, one no-load latency for all
// reads the difference as a queue (issue 19's case: 12-14 ms probes against
// a 27 ms mix, and the limit at 7-8 for 10 workers). So the caller tells
// each request's kind (its lane) at on_start(), and the tag holds it too.
// Each kind gets its own no-load latency from the probes that saw at least
// kKindMinSamples of it (weighed by their samples; kept kKindFresh probes),
// and a window compares each kind with its own:
//     ratio = sum of RTT / sum of (RTT_noload[kind] + tolerance)
// over kind 0 ("not told", against the mean of all) and the kinds a probe
// measured. The others sit out: a queue inside the backend delays every
// kind, so the measured ones show it. A window stays open until it holds
// kMinMeasured comparable samples (a drop closes it at once); one that
// never does closes after kMaxWindows windows and holds the limit. Before
// any kind is measured, every sample is compared with the mean of all.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/time.hpp"

namespace levee::core {

struct AdaptiveLimitConfig {
  std::uint32_t min = 4;
  std::uint32_t max = 1000;
  std::uint32_t initial = 20;
  Duration min_window = std::chrono::milliseconds(100);
  std::uint32_t min_samples = 50;
  /// Target backend queue, as a fraction of the limit: alpha..beta. beta
  /// widens to three standard errors of the RTT average when it is noisy.
  double alpha = 0.05;
  double beta = 0.20;
  Duration probe_interval = std::chrono::seconds(10);
  /// Latency growth below this is not read as backend queueing. Against a
  /// backend answering in tens of microseconds, the proxy's own scheduling
  /// noise is larger than any queue inside the backend.
  Duration rtt_tolerance = std::chrono::milliseconds(1);
  bool operator==(const AdaptiveLimitConfig&) const = default;
};

struct ConcurrencyLimitConfig {
  bool adaptive = false;
  std::uint32_t static_limit = 64;
  AdaptiveLimitConfig adaptive_cfg{};
  bool operator==(const ConcurrencyLimitConfig&) const = default;
};

class ConcurrencyLimit {
 public:
  explicit ConcurrencyLimit(ConcurrencyLimitConfig cfg = {}) noexcept;

  /// The limit in force now (halved while probing).
  std::uint32_t limit() const noexcept { return probing_ ? probe_limit() : limit_; }
  /// The limit outside probe windows.
  std::uint32_t base_limit() const noexcept { return limit_; }
  bool adaptive() const noexcept { return cfg_.adaptive; }
  bool probing() const noexcept { return probing_; }

  /// Kinds of request the caller tells apart (the queue's lanes); kind 0
  /// is "not told", measured against the mean of all.
  static constexpr std::uint32_t kKinds = 8;

  /// A request of `kind` (< kKinds) was granted a permit (started).
  /// Returns its tag: its kind and the number of the probe it is part of,
  /// for its sample (or its loss) to bring back. 0 tells nothing.
  std::uint32_t on_start(TimePoint now, std::uint32_t kind = 0) noexcept;
  /// The tag of a request of `kind` let through without on_start() (a
  /// dry run's, above the limit): its kind, and no probe.
  std::uint32_t tag(std::uint32_t kind) const noexcept { return cfg_.adaptive ? kind_of(kind) : 0; }

  /// One completed request: its round-trip latency, the in-flight count
  /// when it started and the tag on_start() returned for it. dropped: the
  /// backend rejected it for overload or it timed out (treated as a strong
  /// congestion signal).
  void on_sample(TimePoint now, Duration rtt, std::uint32_t inflight, bool dropped, std::uint32_t tag) noexcept;
  /// A granted request ended without a sample (it failed, or its client
  /// left): the probe it was part of no longer waits for it.
  void on_lost(TimePoint now, std::uint32_t tag) noexcept;

  /// The no-load latency of all kinds together.
  double noload_rtt_seconds() const noexcept { return noload_; }

 private:
  std::uint32_t probe_limit() const noexcept {
    return std::max(cfg_.adaptive_cfg.min, limit_ / 2);
  }
  void end_window(TimePoint now) noexcept;
  void start_probe(TimePoint now) noexcept;
  void finish_probe(TimePoint now) noexcept;
  void reset_window(TimePoint now) noexcept;
  /// Ends the probe once every request it started is back, or at its time limit.
  void maybe_finish_probe(TimePoint now) noexcept;

  ConcurrencyLimitConfig cfg_;
  std::uint32_t limit_;
  static constexpr std::uint32_t kKindBits = 3;
  static constexpr std::uint32_t kProbeMask = (1u << (32 - kKindBits)) - 1;
  /// A kind's latency counts from probes with at least this many of its
  /// requests, and for this many probes after the last such.
  static constexpr std::uint32_t kKindMinSamples = 3;
  static constexpr std::uint32_t kKindFresh = 3;
  /// A window closes with at least this many samples of measured kinds.
  static constexpr std::uint32_t kMinMeasured = 10;
  /// Nothing waits longer than this many `min_window`s: a probe for the
  /// requests it started (one may never come back), a window for
  /// comparable samples (it then holds the limit as it is).
  static constexpr std::uint32_t kMaxWindows = 20;
  static double sum(const std::array<double, kKinds>& a) noexcept {
    double s = 0;
    for (double x : a) s += x;
    return s;
  }
  static_assert(kKinds == 1u << kKindBits);
  static std::uint32_t kind_of(std::uint32_t tag) noexcept { return tag & (kKinds - 1); }
  static std::uint32_t probe_of(std::uint32_t tag) noexcept { return tag >> kKindBits; }
  /// Which kinds a probe measured lately (bit k: kind k), set as a probe ends.
  void update_measured() noexcept;
  /// The window's samples that have a no-load latency to compare with:
  /// kind 0's and the measured kinds', or all of them before any kind was.
  std::uint32_t comparable_samples() const noexcept;
  /// The window's latency over what the same requests take with no
  /// backend queue (each kind's no-load latency plus the tolerance; with
  /// noload false, the tolerance alone); 0 when none of its samples has one.
  double window_ratio(bool noload) const noexcept;

  // current window
  TimePoint window_start_{};
  bool window_open_ = false;
  std::uint32_t samples_ = 0;
  std::array<std::uint32_t, kKinds> kind_samples_{};  // of samples_, by kind
  std::array<double, kKinds> kind_rtt_{};             // sum of RTT (s), by kind
  std::uint32_t max_inflight_ = 0;
  std::uint32_t drops_ = 0;
  // estimates
  double noload_ = std::numeric_limits<double>::infinity();
  std::array<double, kKinds> kind_noload_{};  // 0: that kind not measured yet
  std::array<std::uint32_t, kKinds> kind_probe_{};  // the probe that last measured it
  std::array<double, kKinds> kind_weight_{};        // samples behind kind_noload_, halved each probe
  std::uint32_t measured_ = 0;                       // update_measured()
  double smoothed_ = 0;  // latency over floor, averaged across windows
  double variance_ = 0;  // of window ratios around smoothed_
  bool probed_ = false;
  TimePoint last_probe_{};
  bool probing_ = false;
  // the probe in progress
  std::uint32_t probe_id_ = 0;  // its number (never 0 once one began)
  TimePoint probe_begin_{};
  bool probe_closed_ = false;  // starts from now on are not part of it
  std::uint32_t probe_started_ = 0;
  std::uint32_t probe_done_ = 0;  // back with a sample
  std::uint32_t probe_lost_ = 0;  // back without one
  std::array<double, kKinds> probe_kind_sum_{};  // sum of RTT (s), by kind
  std::array<std::uint32_t, kKinds> probe_kind_done_{};
};

}  // namespace levee::core
