// Everything /metrics exports: the request path's sharded counters and
// histograms, and gauges read at scrape time (cluster state under its lock
// once per scrape, endpoint and listener atomics, executor load, pools,
// the access log's own counters).
#pragma once

#include <memory>
#include <vector>

#include "metrics/metrics.hpp"

namespace levee::proxy {
class Runtime;
class Worker;
}  // namespace levee::proxy

namespace levee::control {

class AccessLog;

void register_metrics(metrics::Registry& r, const std::shared_ptr<proxy::Runtime>& rt,
                      const std::vector<std::unique_ptr<proxy::Worker>>& workers, const AccessLog& log);

}  // namespace levee::control
