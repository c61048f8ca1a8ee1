// What the admission core needs from a configuration: the config's typed
// structs turned into core's. Built once per (re)load, by the proxy and by
// anything else that runs the core from the same YAML file.
#pragma once

#include "config/config.hpp"
#include "core/admission.hpp"
#include "core/classify.hpp"
#include "core/endpoints.hpp"
#include "core/executor_load.hpp"

namespace levee::config {

/// Tenants by id: `default` first, then the configured ones in file order.
core::TenantTable tenant_table(const Config& c);

/// Gates 2-4 of one cluster (quotas resolved against the tenant table).
core::AdmissionConfig admission_config(const Config& c, const ClusterConfig& cl, const core::TenantTable& t);

core::EndpointPolicy endpoint_policy(const ClusterConfig& cl);

core::SelfProtectionPolicy self_protection_policy(const SelfProtectionConfig& s);
core::ExecutorLoadConfig executor_load_config(const SelfProtectionConfig& s);
core::ExecutorLoadConfig host_cpu_config(const SelfProtectionConfig& s);

/// One listener's routes and tenant sources. `t` must outlive the result.
core::Classifier classifier(const Config& c, const ListenerConfig& l, const core::TenantTable& t);

}  // namespace levee::config
