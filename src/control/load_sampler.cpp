#include "control/load_sampler.hpp"

#include <boost/asio/post.hpp>

#include "config/to_core.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
std::uint64_t mono_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
core::CriticalityMask over_mask(const core::ExecutorLoad& l) {
  core::CriticalityMask m = 0;
  for (auto c : core::kAllCriticalities)
    if (l.over(c)) m |= core::bit(c);
  return m;
}
}  // namespace

LoadSampler::LoadSampler(std::shared_ptr<proxy::Runtime> rt, std::vector<proxy::Worker*> workers)
    : rt_(std::move(rt)),
      workers_(std::move(workers)),
      load_timer_(ctx_),
      host_timer_(ctx_),
      tick_timer_(ctx_),
      executor_(config::executor_load_config(rt_->cfg->self_protection)),
      host_(config::host_cpu_config(rt_->cfg->self_protection)) {}

void LoadSampler::set_runtime(std::shared_ptr<proxy::Runtime> rt) {
  asio::post(ctx_, [this, rt = std::move(rt)]() mutable {
    const auto& was = rt_->cfg->self_protection;
    const auto& now = rt->cfg->self_protection;
    // New smoothing or thresholds start the averages afresh; otherwise
    // they carry on.
    if (was.time_constant != now.time_constant || was.thresholds != now.thresholds)
      executor_ = core::ExecutorLoad(config::executor_load_config(now));
    if (was.host_cpu.time_constant != now.host_cpu.time_constant || was.host_cpu.thresholds != now.host_cpu.thresholds)
      host_ = core::ExecutorLoad(config::host_cpu_config(now));
    const bool host_was = was.host_cpu.enabled;
    rt_ = std::move(rt);
    if (!host_was && rt_->cfg->self_protection.host_cpu.enabled) sample_host();
  });
}

LoadSampler::~LoadSampler() { stop(); }

void LoadSampler::start() {
  for (auto* w : workers_) {
    Probe p;
    p.reader = std::make_unique<ThreadSchedReader>(w->tid.load());
    probes_.push_back(std::move(p));
  }
  sample_executor();
  if (rt_->cfg->self_protection.host_cpu.enabled) sample_host();
  tick();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "levee-sampler");
    ctx_.run();
  });
}

void LoadSampler::stop() {
  ctx_.stop();
  if (thread_.joinable()) thread_.join();
}

void LoadSampler::sample_executor() {
  const auto& sp = rt_->cfg->self_protection;
  const std::uint64_t wall = mono_ns();
  const auto interval_ns = static_cast<double>(std::chrono::nanoseconds(sp.sample_interval).count());
  double busy = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    auto& w = *workers_[i];
    auto& p = probes_[i];
    // Running or runnable, from the scheduler's own accounting.
    if (auto s = p.reader->read()) {
      if (p.primed && wall > p.last_wall) {
        const auto d = static_cast<double>((s->run_ns - p.last.run_ns) + (s->wait_ns - p.last.wait_ns));
        busy += std::min(1.0, d / static_cast<double>(wall - p.last_wall));
      }
      p.last = *s;
      p.last_wall = wall;
      p.primed = true;
    }
    // Ready work queued in the event loop beyond what one thread can run:
    // how long a probe waited to be run, in sampling intervals.
    if (w.probe_pending.load(std::memory_order_acquire)) {
      const auto waited = static_cast<double>(static_cast<std::int64_t>(wall) - w.probe_posted_ns.load());
      busy += std::max(0.0, waited / interval_ns - 1.0);
    } else {
      busy += std::max(0.0, static_cast<double>(w.probe_delay_ns.load()) / interval_ns - 1.0);
      w.probe_pending.store(true, std::memory_order_release);
      w.probe_posted_ns.store(static_cast<std::int64_t>(wall));
      asio::post(w.ctx, [&w] {
        w.probe_delay_ns.store(static_cast<std::int64_t>(mono_ns()) - w.probe_posted_ns.load());
        w.probe_pending.store(false, std::memory_order_release);
      });
    }
  }
  executor_.sample(proxy::now(), busy, static_cast<double>(workers_.size()));
  const double load = executor_.load();
  rt_->executor_load.store(load, std::memory_order_relaxed);
  rt_->publish_load({over_mask(executor_), host_over_});
  rt_->close_connections.store(sp.enabled && sp.close_connections_above > 0 && load > sp.close_connections_above,
                              std::memory_order_relaxed);
  load_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(sp.sample_interval));
  load_timer_.async_wait([this](error_code ec) {
    if (!ec) sample_executor();
  });
}

void LoadSampler::sample_host() {
  const auto& h = rt_->cfg->self_protection.host_cpu;
  if (!h.enabled) {  // switched off by a reload
    host_over_ = 0;
    rt_->host_cpu.store(0.0, std::memory_order_relaxed);
    return;
  }
  if (auto u = host_cpu_.sample()) {
    host_.sample(proxy::now(), *u, 1.0);
    rt_->host_cpu.store(host_.load(), std::memory_order_relaxed);
    host_over_ = over_mask(host_);
  }
  host_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(h.interval));
  host_timer_.async_wait([this](error_code ec) {
    if (!ec) sample_host();
  });
}

void LoadSampler::tick() {
  const auto t = proxy::now();
  for (auto& c : rt_->clusters) c->tick(t);
  tick_timer_.expires_after(std::chrono::milliseconds(100));
  tick_timer_.async_wait([this](error_code ec) {
    if (!ec) tick();
  });
}

}  // namespace levee::control
