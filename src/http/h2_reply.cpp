#include "http/h2_reply.hpp"

#include <cassert>
#include <charconv>
#include <limits>

#include "core/text.hpp"

namespace levee::http {

Preface detect_preface(std::string_view first) noexcept {
  const std::size_t n = std::min(first.size(), kH2Preface.size());
  if (first.substr(0, n) != kH2Preface.substr(0, n)) return Preface::No;
  return n == kH2Preface.size() ? Preface::Yes : Preface::NeedMore;
}

GrpcStatus grpc_status_of_http(int status) noexcept {
  // gRPC's doc/http-grpc-status-mapping.md.
  switch (status) {
    case 200: return GrpcStatus::Ok;
    case 400: return GrpcStatus::Internal;
    case 401: return GrpcStatus::Unauthenticated;
    case 403: return GrpcStatus::PermissionDenied;
    case 404: return GrpcStatus::Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504: return GrpcStatus::Unavailable;
    default: return GrpcStatus::Unknown;
  }
}

GrpcStatus grpc_status(const LocalReply& r) noexcept {
  using core::Reason;
  switch (r.reason) {
    case Reason::None: return grpc_status_of_http(r.status);
    case Reason::TenantQuota: return GrpcStatus::ResourceExhausted;
    case Reason::ExecutorOverload:
    case Reason::HostCpu:
    case Reason::Throttle:
    case Reason::QueueFull:
    case Reason::QueueWait:
    case Reason::QueueTimeout:
    case Reason::RetryStorm:
    case Reason::Fuse:
    case Reason::ConnectionLimit: return GrpcStatus::Unavailable;
    case Reason::Deadline:
    case Reason::RequestTimeout: return GrpcStatus::DeadlineExceeded;
    case Reason::BadRequest:
    case Reason::BadCriticality:
    case Reason::UriTooLong: return GrpcStatus::InvalidArgument;
    case Reason::HeaderTooLarge: return GrpcStatus::ResourceExhausted;
    case Reason::NotImplemented:
    case Reason::NoRoute: return GrpcStatus::Unimplemented;
    case Reason::NoEndpoint:
    case Reason::UpstreamConnect:
    case Reason::UpstreamReset:
    case Reason::UpstreamTimeout: return GrpcStatus::Unavailable;
    case Reason::ClientGone: return GrpcStatus::Cancelled;
    case Reason::Count_: break;
  }
  return GrpcStatus::Unknown;
}

bool is_grpc(std::string_view ct) noexcept {
  constexpr std::string_view g = "application/grpc";
  if (ct.size() < g.size() || !core::iequals(ct.substr(0, g.size()), g)) return false;
  return ct.size() == g.size() || ct[g.size()] == '+' || ct[g.size()] == ';';
}

void grpc_percent_encode(std::string_view s, std::string& out) {
  static constexpr char hex[] = "0123456789ABCDEF";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '%') {
      out.push_back('%');
      out.push_back(hex[u >> 4]);
      out.push_back(hex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
}

std::string_view H2Fields::find(std::string_view n) const noexcept {
  for (std::size_t i = 0; i < items_.size(); ++i)
    if (name(i) == n) return value(i);
  return {};
}

std::size_t H2Fields::begin(std::string_view n) {
  // Offsets are 32-bit: header blocks are bounded far below (a response
  // head at 64 KiB, max_header_bytes at 1 MiB).
  assert(store_.size() + n.size() < std::numeric_limits<std::uint32_t>::max());
  Item it{};
  it.name_off = static_cast<std::uint32_t>(store_.size());
  it.name_len = static_cast<std::uint32_t>(n.size());
  for (const char c : n) store_.push_back(core::ascii_lower(c));
  it.value_off = static_cast<std::uint32_t>(store_.size());
  items_.push_back(it);
  return store_.size();
}

void H2Fields::add(std::string_view n, std::string_view v) {
  add_with(n, [v](std::string& out) { out.append(v); });
}

void H2Fields::add(std::string_view n, std::uint64_t v) {
  add_with(n, [v](std::string& out) {
    char digits[24];
    const auto r = std::to_chars(digits, digits + sizeof digits, v);
    out.append(digits, r.ptr);
  });
}

namespace {

/// The text a local reply without a body of its own carries: the reason
/// ("overloaded: <reason>" for a shed), and the detail of an error;
/// appended to `out`.
void reply_text(const LocalReply& r, std::string& out) {
  if (!r.body.empty() || r.reason == core::Reason::None) {
    out.append(r.body);
    return;
  }
  const auto& ri = core::info(r.reason);
  const bool shed = ri.kind == core::ReasonKind::Shed;
  if (shed) out.append("overloaded: ");
  out.append(ri.name);
  if (!shed && !r.detail.empty()) out.append(": ").append(r.detail);
}

/// The extra header lines of a reply ("Name: value\r\n" each).
void add_extra(H2Fields& f, std::string_view extra) {
  while (!extra.empty()) {
    const auto eol = extra.find("\r\n");
    const auto line = extra.substr(0, eol);
    extra = eol == std::string_view::npos ? std::string_view{} : extra.substr(eol + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    const auto name = line.substr(0, colon);
    if (core::iequals(name, "connection") || core::iequals(name, "keep-alive") ||
        core::iequals(name, "transfer-encoding") || core::iequals(name, "content-length"))
      continue;
    f.add(name, core::trim(line.substr(colon + 1)));
  }
}

}  // namespace

void h2_local_reply(const LocalReply& r, bool grpc, std::string_view request_id_name, std::string_view request_id,
                    H2Fields& f, std::string& body) {
  f.clear();
  body.clear();
  const auto& ri = core::info(r.reason);
  const bool shed = ri.kind == core::ReasonKind::Shed;
  if (grpc) {
    // Trailers-Only (gRPC's PROTOCOL-HTTP2.md): the status travels in the
    // one HEADERS frame that ends the stream.
    f.add(":status", "200");
    f.add("content-type", "application/grpc");
    f.add("grpc-status", static_cast<std::uint64_t>(grpc_status(r)));
    reply_text(r, body);  // the body's string as scratch: a gRPC reply has none
    f.add_with("grpc-message", [&body](std::string& out) { grpc_percent_encode(body, out); });
    body.clear();
    // Pushback: how long to wait before retrying; negative: do not retry.
    if (r.no_retry) f.add("grpc-retry-pushback-ms", "-1");
    else if (r.retry_after > 0) f.add("grpc-retry-pushback-ms", std::uint64_t{r.retry_after} * 1000);
  } else {
    f.add(":status", static_cast<std::uint64_t>(r.status));
    f.add("content-type", r.content_type);
    if (r.retry_after > 0) f.add("retry-after", std::uint64_t{r.retry_after});
    reply_text(r, body);
    if (r.body.empty() && r.reason != core::Reason::None) body.push_back('\n');
    f.add("content-length", std::uint64_t{body.size()});
  }
  if (r.reason != core::Reason::None) f.add(shed ? "x-levee-reject" : "x-levee-error", ri.name);
  if (r.no_retry) f.add("x-levee-no-retry", "1");
  add_extra(f, r.extra);
  if (!request_id.empty()) f.add(request_id_name, request_id);
  if (r.head) body.clear();
}

bool grpc_message_whole(std::string_view body) noexcept {
  if (body.size() < 5) return false;
  const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(body[i])); };
  const std::uint32_t len = b(1) << 24 | b(2) << 16 | b(3) << 8 | b(4);
  return body.size() - 5 >= len;
}

}  // namespace levee::http
