#include "core/classify.hpp"

namespace levee::core {

TenantTable::TenantTable(std::vector<std::string> names_after_default) {
  names_.push_back("default");
  for (auto& n : names_after_default)
    if (n != "default") names_.push_back(std::move(n));
  for (TenantId i = 0; i < names_.size(); ++i) ids_.emplace(names_[i], i);
}

TenantId TenantTable::find(std::string_view name) const noexcept {
  auto it = ids_.find(name);
  return it == ids_.end() ? kDefaultTenant : it->second;
}

Classifier::Classifier(std::vector<RouteRule> routes, std::vector<TenantSource> sources,
                       const TenantTable& tenants, SignalNames names, TrustPolicy trust)
    : routes_(std::move(routes)),
      sources_(std::move(sources)),
      tenants_(tenants),
      names_(std::move(names)),
      trust_(std::move(trust)) {
  if (sources_.empty()) sources_.emplace_back();
  for (auto& r : routes_)
    if (r.tenant_source >= sources_.size()) r.tenant_source = 0;
}

namespace {
std::string_view strip_port(std::string_view host) noexcept {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(0, close + 1);
  }
  auto colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}
}  // namespace

std::size_t Classifier::match(std::string_view host, std::string_view path) const noexcept {
  host = strip_port(trim(host));
  for (std::size_t i = 0; i < routes_.size(); ++i) {
    const RouteRule& r = routes_[i];
    if (!r.host.empty() && r.host != "*") {
      if (r.host.size() > 2 && r.host[0] == '*' && r.host[1] == '.') {
        const std::string_view suffix = std::string_view(r.host).substr(1);  // ".example.com"
        if (host.size() <= suffix.size() || !iequals(host.substr(host.size() - suffix.size()), suffix)) continue;
      } else if (!iequals(host, r.host)) {
        continue;
      }
    }
    if (path.compare(0, r.prefix.size(), r.prefix) != 0) continue;
    return i;
  }
  return kNoRoute;
}

std::optional<TenantId> certificate_tenant(const TenantSource& ts, const TenantTable& tenants,
                                           const PeerIdentity& id) noexcept {
  if (!ts.certificate_tenants.empty()) {
    for (const auto& u : id.uris)
      if (auto it = ts.certificate_tenants.find(std::string_view(u)); it != ts.certificate_tenants.end()) return it->second;
    for (const auto& d : id.dns)
      if (auto it = ts.certificate_tenants.find(std::string_view(d)); it != ts.certificate_tenants.end()) return it->second;
    if (!id.cn.empty())
      if (auto it = ts.certificate_tenants.find(std::string_view(id.cn)); it != ts.certificate_tenants.end()) return it->second;
  }
  switch (ts.from_certificate) {
    case CertificateTenant::Uri:
      if (!id.uris.empty()) return tenants.find(id.uris.front());
      break;
    case CertificateTenant::Dns:
      if (!id.dns.empty()) return tenants.find(id.dns.front());
      break;
    case CertificateTenant::Cn:
      if (!id.cn.empty()) return tenants.find(id.cn);
      break;
    case CertificateTenant::None:
      break;
  }
  return std::nullopt;
}

}  // namespace levee::core
