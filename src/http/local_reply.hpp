// One writer for every answer levee makes itself: rejections (with
// Retry-After, the reason and "don't retry"), protocol errors, connection
// refusals and the admin listener's pages. A reply is a value; each
// protocol serialises it (HTTP/1.1 here; HTTP/2 maps the same fields to a
// header block).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/decision.hpp"

namespace levee::http {

struct LocalReply {
  std::uint16_t status = 200;
  /// The reason this is an error or a refusal; None for an ordinary answer.
  /// Shed reasons go out as x-levee-reject, errors as x-levee-error.
  core::Reason reason = core::Reason::None;
  std::uint32_t retry_after = 0;  ///< seconds; 0 sends no Retry-After
  bool no_retry = false;          ///< x-levee-no-retry: 1
  bool close = false;             ///< Connection: close
  bool keep_alive_10 = false;     ///< an HTTP/1.0 client asked to keep the connection
  bool head = false;              ///< answering HEAD: the head only
  std::string_view detail;        ///< appended to the reason in the default body
  std::string_view content_type = "text/plain";
  std::string_view body;          ///< empty: "overloaded: <reason>\n" or "<reason>[: detail]\n"
  std::string_view extra;         ///< extra header lines, each ending in CRLF
};

/// A local reply for a rejection decided by a gate.
LocalReply rejection(const core::Decision& d, std::uint32_t retry_after_seconds);
/// A local reply for a failure or protocol error.
LocalReply failure(core::Reason r, std::string_view detail = {});

/// Appends the reply as an HTTP/1.1 response (head and body) to out.
void write_http1(std::string& out, const LocalReply& r);

/// The canonical reason phrase of a status code.
std::string_view status_text(int status) noexcept;

}  // namespace levee::http
