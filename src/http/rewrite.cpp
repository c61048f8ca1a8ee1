#include "http/rewrite.hpp"

#include <algorithm>

#include "core/headers.hpp"
#include "core/text.hpp"
#include "http/framing.hpp"
#include "http/local_reply.hpp"

namespace levee::http {

using core::iequals;

void write_upstream_head(std::string& out, const UpstreamHead& u) {
  const auto& info = u.info;
  const auto& fields = u.head.fields();
  out.append(info.method_str);
  out.push_back(' ');
  out.append(info.target);
  out.append(" HTTP/1.1\r\n");
  const bool absolute = !info.authority.empty();
  for (const auto& f : fields) {
    if (is_hop_by_hop(f) || f.id == FieldId::expect || f.id == FieldId::via) continue;
    if (absolute && f.id == FieldId::host) continue;  // the target's authority wins
    if (iequals(f.name, "x-forwarded-for") || iequals(f.name, "x-forwarded-proto")) continue;
    if (iequals(f.name, u.names.timeout_ms) || iequals(f.name, u.names.attempt) || iequals(f.name, "grpc-timeout"))
      continue;
    if (info.connection_tokens > 0 && named_in_connection(fields, f.name)) continue;
    if (!u.load_format.empty() && iequals(f.name, "endpoint-load-metrics-format")) continue;
    if (std::any_of(u.replace.begin(), u.replace.end(),
                    [&](const UpstreamHead::Replace& r) { return !r.name.empty() && iequals(f.name, r.name); }))
      continue;
    append_field(out, f.name, f.value);
  }
  if (!u.load_format.empty()) append_field(out, "endpoint-load-metrics-format", u.load_format);
  for (const auto& r : u.replace)
    if (!r.name.empty() && !r.value.empty()) append_field(out, r.name, r.value);
  if (absolute) append_field(out, "host", info.authority);
  else if (info.host < 0 && !u.default_host.empty()) append_field(out, "host", u.default_host);
  // Via and X-Forwarded-For append to what came in.
  out.append("via: ");
  if (info.via >= 0) {
    out.append(u.head.value(info.via));
    out.append(", ");
  }
  out.append(info.version == 10 ? "1.0 levee\r\n" : info.version == 20 ? "2 levee\r\n" : "1.1 levee\r\n");
  out.append("x-forwarded-for: ");
  if (info.xff >= 0 && u.forwarded_trusted) {
    out.append(u.head.value(info.xff));
    out.append(", ");
  }
  out.append(u.client_ip);
  out.append("\r\nx-forwarded-proto: ");
  out.append(u.proto);
  out.append("\r\n");
  if (!u.generated_id.empty()) append_field(out, u.names.request_id, u.generated_id);
  if (u.remaining) {
    // Rounded down to the millisecond, never below 1: never promise more
    // time than there is.
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*u.remaining).count();
    out.append(u.names.timeout_ms);
    out.append(": ");
    append_uint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(1, ms)));
    out.append("\r\n");
    if (u.grpc_timeout) {
      char buf[16];
      const auto n = core::format_grpc_timeout(*u.remaining, buf);
      append_field(out, "grpc-timeout", std::string_view(buf, n));
    }
  }
  out.append(u.names.attempt);
  out.append(": ");
  append_uint(out, u.attempt);
  out.append("\r\n");
  if (u.framing == BodyFraming::Chunked) {
    out.append("transfer-encoding: chunked\r\n");
  } else if (u.framing == BodyFraming::Length) {
    out.append("content-length: ");
    append_uint(out, u.length);
    out.append("\r\n");
  }
  out.append("\r\n");
}

bool is_inside_field(const ResponseInfo& info, const Field& f, std::size_t index) noexcept {
  const int i = static_cast<int>(index);
  return i == info.load_report || i == info.load_report_bin || core::iequals(f.name, "server");
}

void write_downstream_head(std::string& out, const DownstreamHead& d) {
  const auto& fields = d.head.fields();
  out.append("HTTP/1.1 ");
  append_uint(out, static_cast<std::uint64_t>(d.info.status));
  out.push_back(' ');
  out.append(d.info.reason.empty() ? status_text(d.info.status) : d.info.reason);
  out.append("\r\n");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    if (d.strip_inside && is_inside_field(d.info, f, i)) continue;
    if (f.id == FieldId::content_length && d.no_body) {
      append_field(out, f.name, f.value);  // HEAD and 304 describe the real body
      continue;
    }
    if (is_hop_by_hop(f)) continue;
    if (named_in_connection(fields, f.name)) continue;
    if (!d.request_id.empty() && core::iequals(f.name, d.names.request_id)) continue;
    append_field(out, f.name, f.value);
  }
  if (!d.request_id.empty()) append_field(out, d.names.request_id, d.request_id);
  if (d.framing == BodyFraming::Length) {
    out.append("content-length: ");
    append_uint(out, d.length);
    out.append("\r\n");
  } else if (d.framing == BodyFraming::Chunked) {
    out.append("transfer-encoding: chunked\r\n");
  }
  if (d.no_retry) append_field(out, d.names.no_retry, "1");
  if (d.close) out.append("connection: close\r\n");
  else if (d.keep_alive_10) out.append("connection: keep-alive\r\n");
  out.append("\r\n");
}

}  // namespace levee::http
