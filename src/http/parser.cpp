#include "http/parser.hpp"

#include <boost/beast/http/error.hpp>

#include "core/headers.hpp"
#include "core/text.hpp"

namespace levee::http {

using core::iequals;

void RequestParser::on_request_impl(Verb method, boost::beast::string_view method_str,
                                    boost::beast::string_view target, int version, error_code&) {
  info_.method = method;
  info_.method_str = head_.store({method_str.data(), method_str.size()});
  info_.target = head_.store({target.data(), target.size()});
  info_.version = version;
}

void RequestParser::on_stored(FieldId id, std::string_view name, std::string_view value, int at,
                              error_code& ec) {
  switch (id) {
    case FieldId::host:
      if (info_.host >= 0) {
        ec = beast_http::error::bad_value;  // two Host fields: ambiguous target
        return;
      }
      info_.host = at;
      return;
    case FieldId::expect:
      if (iequals(core::trim(value), "100-continue")) info_.expect_continue = true;
      else info_.bad_expect = true;
      return;
    case FieldId::connection:
      core::for_each_token(value, [&](std::string_view t) {
        if (iequals(t, "close")) info_.connection_close = true;
        else if (!iequals(t, "keep-alive")) ++info_.connection_tokens;
      });
      return;
    case FieldId::via:
      info_.via = at;
      return;
    default:
      break;
  }
  if (iequals(name, "x-forwarded-for")) info_.xff = at;
  else if (iequals(name, request_id_)) info_.request_id = at;
}

void ResponseParser::on_response_impl(int code, boost::beast::string_view reason, int version, error_code&) {
  info_.status = code;
  info_.version = version;
  info_.reason = head_.store({reason.data(), reason.size()});
}

void ResponseParser::on_stored(FieldId, std::string_view name, std::string_view value, int at, error_code&) {
  if (iequals(name, names_.load_report)) info_.load_report = at;
  else if (iequals(name, names_.no_retry) || iequals(name, "x-envoy-overloaded")) info_.no_retry = true;
  else if (iequals(name, "grpc-retry-pushback-ms") && core::pushback_says_no_retry(value)) info_.no_retry = true;
}

}  // namespace levee::http
