#include "http/local_reply.hpp"

#include "http/framing.hpp"

namespace levee::http {

LocalReply rejection(const core::Decision& d, std::uint32_t retry_after_seconds) {
  LocalReply r;
  r.status = d.status;
  r.reason = d.reason;
  r.retry_after = retry_after_seconds;
  r.no_retry = d.no_retry;
  return r;
}

LocalReply failure(core::Reason reason, std::string_view detail) {
  LocalReply r;
  r.status = core::info(reason).status;
  r.reason = reason;
  r.detail = detail;
  return r;
}

void write_http1(std::string& out, const LocalReply& r) {
  const auto& ri = core::info(r.reason);
  const bool shed = ri.kind == core::ReasonKind::Shed;
  std::size_t body_len = r.body.size();
  if (r.body.empty() && r.reason != core::Reason::None) {
    body_len = (shed ? 12 : 0) + ri.name.size() + 1 + (!shed && !r.detail.empty() ? r.detail.size() + 2 : 0);
  }
  out.append("HTTP/1.1 ");
  append_uint(out, r.status);
  out.push_back(' ');
  out.append(status_text(r.status));
  out.append("\r\ncontent-type: ");
  out.append(r.content_type);
  out.append("\r\n");
  if (r.retry_after > 0) {
    out.append("retry-after: ");
    append_uint(out, r.retry_after);
    out.append("\r\n");
  }
  if (r.reason != core::Reason::None) append_field(out, shed ? "x-levee-reject" : "x-levee-error", ri.name);
  if (r.no_retry) out.append("x-levee-no-retry: 1\r\n");
  if (r.close) out.append("connection: close\r\n");
  else if (r.keep_alive_10) out.append("connection: keep-alive\r\n");
  out.append(r.extra);
  out.append("content-length: ");
  append_uint(out, body_len);
  out.append("\r\n\r\n");
  if (r.head) return;
  if (!r.body.empty() || r.reason == core::Reason::None) {
    out.append(r.body);
    return;
  }
  if (shed) out.append("overloaded: ");
  out.append(ri.name);
  if (!shed && !r.detail.empty()) {
    out.append(": ");
    out.append(r.detail);
  }
  out.push_back('\n');
}

std::string_view status_text(int s) noexcept {
  switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

}  // namespace levee::http
