// The control plane's clock-driven work that the request path depends on,
// on a thread of its own so nothing else can delay it (the admin page, a
// metrics scrape, health checks and name resolution run elsewhere):
//   - every sample_interval (5 ms): levee's executor load, from each
//     worker's scheduler accounting (run + run-queue time) and the delay of
//     a probe posted to its event loop; published as the per-criticality
//     "over threshold" bits gate 1 reads;
//   - as a sidecar, host or cgroup CPU as a second signal;
//   - every 100 ms: each cluster's tick (slow-start ramps, expired
//     ejections, queued requests whose time is up).
// Nothing here blocks: it reads /proc and cgroup files and takes cluster
// locks for O(1) work.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "control/cpu.hpp"
#include "core/admission.hpp"
#include "core/executor_load.hpp"

namespace levee::proxy {
class Runtime;
class Worker;
}  // namespace levee::proxy

namespace levee::control {

class LoadSampler {
 public:
  LoadSampler(std::shared_ptr<proxy::Runtime> rt, std::vector<proxy::Worker*> workers);
  ~LoadSampler();
  /// Reads each worker's thread id (they must have started) and starts.
  void start();
  void stop();
  const std::string& host_cpu_source() const noexcept { return host_cpu_.source(); }
  /// A reload: from the next sample on, rt's clusters are ticked and its
  /// settings used (posted to the sampler's thread).
  void set_runtime(std::shared_ptr<proxy::Runtime> rt);

 private:
  void sample_executor();
  void sample_host();
  void tick();

  std::shared_ptr<proxy::Runtime> rt_;  // on the sampler's thread
  std::vector<proxy::Worker*> workers_;
  boost::asio::io_context ctx_{1};
  boost::asio::steady_timer load_timer_;
  boost::asio::steady_timer host_timer_;
  boost::asio::steady_timer tick_timer_;
  core::ExecutorLoad executor_;
  core::ExecutorLoad host_;
  HostCpu host_cpu_;
  core::CriticalityMask host_over_ = 0;
  struct Probe {
    std::unique_ptr<ThreadSchedReader> reader;
    ThreadSched last{};
    std::uint64_t last_wall = 0;
    bool primed = false;
  };
  std::vector<Probe> probes_;
  std::thread thread_;
};

}  // namespace levee::control
