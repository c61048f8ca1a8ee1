// One try at an endpoint, and what became of it: shared by the HTTP/1.1
// attempt (exchange_h1.cpp), the HTTP/2 one (exchange_h2.cpp) and the
// exchange that retries them (exchange.cpp).
#pragma once

#include <optional>

#include "core/orca.hpp"
#include "core/retry.hpp"
#include "proxy/exchange.hpp"
#include "proxy/request_metrics.hpp"

namespace levee::proxy {

using core::TimePoint;

/// One try at an endpoint, and what became of it.
struct Exchange::Attempt {
  std::uint32_t number = 1;  ///< x-attempt-count sent with it
  std::size_t endpoint = core::kNoEndpoint;
  bool reused = false;       ///< on a pooled connection
  bool sent = false;         ///< some byte of the request was accepted by the socket
  bool body_streamed = false;  ///< body bytes left levee beyond what the sink holds
  bool whole = false;        ///< the whole request went out: the backend can act on it
  bool put = false;          ///< first_write() made the first write (without waiting)
  std::size_t taken = 0;     ///< the bytes of that write the socket took at once
  TimePoint begun{};  ///< when forward() started it: the pool's and the connect's clock
  TimePoint sent_at{};
  TimePoint head_at{};
  // The outcome: a response head, an upstream failure, or the client's end.
  bool failed = false;
  core::AttemptFailure failure = core::AttemptFailure::Reset;
  UpstreamError error = UpstreamError::Reset;
  std::optional<BodyRead> client;  ///< the client failed while its body was relayed
  bool overloaded = false;         ///< 429/503 or an overload marker
  bool head_read = false;          ///< the response head arrived (early, while the request was sent)
  core::LoadReport load;
  bool load_ok = false;
};

}  // namespace levee::proxy
