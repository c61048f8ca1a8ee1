// CPU signals read from the OS, for self-protection:
//  - per worker thread: time running plus time runnable-but-waiting, from
//    /proc/self/task/<tid>/schedstat (falls back to the thread CPU clock);
//  - the host or the process's cgroup: utilization of what it may use
//    (cgroup v2 cpu.stat/cpu.max, v1 cpuacct/cfs quota, else /proc/stat),
//    counting time throttled by a cgroup quota as saturation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace levee::control {

/// Nanoseconds a thread ran and waited runnable, cumulative.
struct ThreadSched {
  std::uint64_t run_ns = 0;
  std::uint64_t wait_ns = 0;
};

class ThreadSchedReader {
 public:
  explicit ThreadSchedReader(int tid);
  ~ThreadSchedReader();
  ThreadSchedReader(const ThreadSchedReader&) = delete;
  ThreadSchedReader& operator=(const ThreadSchedReader&) = delete;
  std::optional<ThreadSched> read() const;

 private:
  int fd_ = -1;
};

/// Utilization of the CPU this process may use, in [0, 1] (1 when throttled).
class HostCpu {
 public:
  HostCpu();
  /// Call periodically; returns utilization since the previous call.
  std::optional<double> sample();
  const std::string& source() const noexcept { return source_; }

 private:
  std::string source_;
  std::string dir_;  // cgroup directory, if any
  bool v2_ = false;
  double cpus_ = 1;
  std::uint64_t last_usage_ns_ = 0;
  std::uint64_t last_throttled_ns_ = 0;
  std::uint64_t last_wall_ns_ = 0;
  std::uint64_t last_idle_ = 0, last_total_ = 0;
  bool primed_ = false;
};

/// CPUs available to this process: affinity mask, capped by a cgroup quota.
unsigned available_cpus();

}  // namespace levee::control
