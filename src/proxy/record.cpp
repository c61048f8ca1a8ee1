#include "proxy/record.hpp"

#include "core/text.hpp"

#include "control/access_log.hpp"
#include "proxy/cluster.hpp"
#include "proxy/downstream.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

void Record::settle() noexcept {
  if (settled_) return;
  settled_ = true;
  auto& rt = l_.runtime();
  auto& m = *rt.metrics;
  const std::size_t shard = w_.index;
  const double dur = core::to_seconds(now() - start);
  const auto [rx, tx] = d_.take_bytes();
  if (route) m.requests.inc(shard, m.requests.index({route->metric_index, code_class(status)}));
  if (cluster) m.request_duration.observe(shard, m.request_duration.index({cluster->index, rejected ? 1u : 0u}), dur);
  m.bytes.inc(shard, 0, rx);
  m.bytes.inc(shard, 1, tx);

  control::LogRecord lr;
  lr.client = b_.client_text();
  lr.method = b_.req.method_str;
  lr.target = b_.req.target;
  lr.version = b_.req.version;
  lr.status = status;
  if (route) lr.route = route->name;
  if (cluster) {
    lr.cluster = cluster->cfg.name;
    if (endpoint < cluster->endpoints.size()) lr.endpoint = cluster->endpoints[endpoint]->label;
  }
  lr.criticality = criticality;
  lr.tenant = rt.tenants.name(tenant);
  lr.duration_ms = dur * 1e3;
  lr.upstream_ms = upstream_ms;
  lr.queue_ms = queue_ms;
  lr.rx_bytes = rx;
  lr.tx_bytes = tx;
  lr.reason = reason;
  lr.request_id = request_id;
  lr.attempts = attempts;
  lr.host = http::authority(b_.req_head, b_.req);
  if (w_.log.wants_headers()) {
    for (const auto& f : b_.req_head.fields()) {
      if (f.id == http::FieldId::user_agent) lr.user_agent = f.value;
      else if (f.name.size() == 15 && core::iequals(f.name, "x-forwarded-for")) lr.xff = f.value;
    }
  }
  w_.log.log(lr, w_.rng.uniform());
}

}  // namespace levee::proxy
