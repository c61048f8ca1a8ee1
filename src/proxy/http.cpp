#include "proxy/http.hpp"

#include <boost/beast/http/error.hpp>

#include "core/text.hpp"

namespace levee::proxy {

using core::iequals;

bool Head::add(http::field id, std::string_view name, std::string_view value) {
  if (fields_.size() >= max_fields_) return false;
  auto n = store(name);
  auto v = store(value);
  fields_.push_back(Field{n, v, id});
  return true;
}

std::string_view Head::store(std::string_view s) {
  if (s.empty()) return {};
  Block* b = &blocks_.back();
  if (used_ + s.size() > b->size) {
    // The parser's header limit bounds the total, so this happens only for
    // unusually large heads.
    std::size_t n = std::max(kBlock, s.size());
    blocks_.push_back({std::make_unique<char[]>(n), n});
    b = &blocks_.back();
    used_ = 0;
  }
  char* at = b->data.get() + used_;
  std::memcpy(at, s.data(), s.size());
  used_ += s.size();
  return {at, s.size()};
}

void RequestParser::on_request_impl(http::verb method, boost::beast::string_view method_str,
                                    boost::beast::string_view target, int version, error_code&) {
  info_.method = method;
  info_.method_str = head_.store({method_str.data(), method_str.size()});
  info_.target = head_.store({target.data(), target.size()});
  info_.version = version;
}

void RequestParser::on_stored(http::field id, std::string_view name, std::string_view value, int at,
                              error_code& ec) {
  switch (id) {
    case http::field::host:
      if (info_.host >= 0) {
        ec = http::error::bad_value;  // two Host fields: ambiguous target
        return;
      }
      info_.host = at;
      return;
    case http::field::expect:
      if (iequals(core::trim(value), "100-continue")) info_.expect_continue = true;
      else info_.bad_expect = true;
      return;
    case http::field::connection:
      core::for_each_token(value, [&](std::string_view t) {
        if (iequals(t, "close")) info_.connection_close = true;
        else if (!iequals(t, "keep-alive")) ++info_.connection_tokens;
      });
      return;
    default:
      break;
  }
  if (iequals(name, "x-forwarded-for")) {
    info_.xff = at;
    return;
  }
  if (iequals(name, "via")) {
    info_.via = at;
    return;
  }
  if (iequals(name, names_.criticality)) info_.criticality = at;
  else if (iequals(name, names_.tenant)) info_.tenant = at;
  else if (!names_.api_key.empty() && iequals(name, names_.api_key)) info_.api_key = at;
  else if (iequals(name, names_.timeout_ms)) info_.timeout_ms = at;
  else if (iequals(name, "grpc-timeout")) info_.grpc_timeout = at;
  else if (iequals(name, names_.attempt)) info_.attempt = at;
  else if (iequals(name, "x-envoy-attempt-count")) info_.envoy_attempt = at;
  else if (iequals(name, "grpc-previous-rpc-attempts")) info_.grpc_attempts = at;
  else if (iequals(name, names_.request_id)) info_.request_id = at;
}

void ResponseParser::on_response_impl(int code, boost::beast::string_view reason, int version,
                                      error_code&) {
  info_.status = code;
  info_.version = version;
  info_.reason = head_.store({reason.data(), reason.size()});
}

void ResponseParser::on_stored(http::field, std::string_view name, std::string_view value, int at,
                               error_code&) {
  if (iequals(name, names_.load_report)) info_.load_report = at;
  else if (iequals(name, names_.no_retry) || iequals(name, "x-envoy-overloaded")) info_.no_retry = true;
  else if (iequals(name, "grpc-retry-pushback-ms")) {
    auto v = core::trim(value);
    if (!v.empty() && v.front() == '-') info_.no_retry = true;
  }
}

bool is_hop_by_hop(const Field& f) noexcept {
  switch (f.id) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::proxy_authenticate:
    case http::field::content_length:  // re-framed by levee
      return true;
    default:
      return false;
  }
}

bool named_in_connection(const std::vector<Field>& fields, std::string_view name) noexcept {
  for (const auto& f : fields) {
    if (f.id != http::field::connection) continue;
    bool found = false;
    core::for_each_token(f.value, [&](std::string_view t) {
      if (iequals(t, name)) found = true;
    });
    if (found) return true;
  }
  return false;
}

std::size_t chunk_header(char* buf, std::size_t n) noexcept {
  int len = 0;
  char tmp[20];
  do {
    int d = static_cast<int>(n & 0xf);
    tmp[len++] = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
    n >>= 4;
  } while (n);
  std::size_t i = 0;
  while (len) buf[i++] = tmp[--len];
  buf[i++] = '\r';
  buf[i++] = '\n';
  return i;
}

void append_chunk_header(std::string& out, std::size_t n) {
  char buf[24];
  out.append(buf, chunk_header(buf, n));
}

}  // namespace levee::proxy
