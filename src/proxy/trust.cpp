// The trust boundary, as the exchange applies it. Classification
// (core/classify.hpp) already decided which of the request's signals it
// believed; here the headers it did not believe are counted, and replaced in
// the head sent upstream by what levee decided, so a backend behind levee
// can trust what it receives:
//
//   criticality  the class levee used (the route's default, or a capped claim)
//   tenant       the tenant levee used
//   deadline     already levee's own remaining budget (http/rewrite.cpp)
//   attempt      already levee's own attempt number
//
// An untrusted client's X-Forwarded-For chain is dropped too (levee's entry,
// the address it saw, stays), and X-Forwarded-Proto is https on a TLS
// listener.
#include "core/criticality.hpp"
#include "http/rewrite.hpp"
#include "proxy/exchange.hpp"
#include "proxy/listener.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

void Exchange::count_untrusted() noexcept {
  if (cls_.ignored == 0) return;
  auto& t = rt_.metrics->untrusted;
  for (std::size_t k = 0; k < kUntrustedKinds; ++k)
    if (cls_.ignored & (1u << k)) t.inc(w_.index, t.index({l_.index, k}));
}

void Exchange::untrusted_rewrite(http::UpstreamHead& u) const noexcept {
  u.proto = d_.peer().tls ? "https" : "http";
  u.forwarded_trusted = cls_.trusted;
  if (cls_.ignored & core::kIgnoredCriticality) u.replace[0] = {rt_.cfg->headers.criticality, core::to_string(cls_.criticality)};
  if ((cls_.ignored & core::kIgnoredTenant) && cls_.route != core::kNoRoute) {
    const auto& header = l_.classifier.source(cls_.route).header;
    if (!header.empty()) u.replace[1] = {header, rt_.tenants.name(cls_.tenant)};
  }
}

}  // namespace levee::proxy
