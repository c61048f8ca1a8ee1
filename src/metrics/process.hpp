// The standard process metrics every Prometheus client exports, read from
// /proc/self at scrape time, and levee_build_info.
//
//   process_cpu_seconds_total        user + system CPU time (counter)
//   process_resident_memory_bytes    resident set size
//   process_virtual_memory_bytes     virtual memory size
//   process_open_fds                 open file descriptors
//   process_max_fds                  the soft RLIMIT_NOFILE
//   process_start_time_seconds       start time, seconds since the epoch
//   levee_build_info{version, commit, build_type, allocator} = 1
//
// Names and meanings follow the Prometheus client guidelines ("Process
// metrics"), so dashboards written for any exporter's process_* work.
#pragma once

#include <vector>

#include "metrics/metrics.hpp"

namespace levee::metrics {

/// The gauges above, ready for Registry::add. A value whose /proc file
/// cannot be read is left out of the scrape rather than reported as 0.
std::vector<GaugeSet> process_gauges();

/// What levee_build_info says, for GET /admin/info.
struct BuildInfo {
  const char* version;
  const char* commit;
  const char* build_type;
  const char* allocator;  // "tcmalloc" when the running process allocates through it, else "system"
};
BuildInfo build_info() noexcept;

}  // namespace levee::metrics
