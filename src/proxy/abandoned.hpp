// An HTTP/1.1 attempt levee stopped waiting for (its client left, or its
// deadline or response timeout passed) after the whole request had gone
// to the backend.
//
// The backend is not told by anything it must listen to, and most go on
// working until they answer. Were the permit returned at once, the request
// sent in its place would wait in the backend's own queue behind the
// abandoned one, and clients that give up en masse (the first sign of an
// overload) would make levee pile work on a backend that is already late.
// So the connection is kept, with its sending side shut (a backend that
// watches for its client going away sees it, as it would a close), and the
// permit comes back when the backend is done with the request: when it
// begins to answer or closes, or at the attempt's response timeout, the
// longest levee waits for any backend. The connection is then closed, never
// pooled. (Over HTTP/2 the backend is told, with RST_STREAM, and the
// permit comes back at once.)
#pragma once

#include <memory>

#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/cluster.hpp"
#include "proxy/upstream.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

class Runtime;

class AbandonedAttempt : public std::enable_shared_from_this<AbandonedAttempt> {
 public:
  /// Holds `permit` (of a cluster of `rt`) until the backend on `up` is
  /// done, or until `until`.
  static void start(Worker& w, const Runtime& rt, std::unique_ptr<UpstreamConn> up, Permit permit,
                    core::TimePoint until);

  AbandonedAttempt(Worker& w, const Runtime& rt, std::unique_ptr<UpstreamConn> up, Permit permit);

 private:
  void end() noexcept;

  Worker::Pin pin_;  ///< the Runtime whose cluster the permit is of
  std::unique_ptr<UpstreamConn> up_;
  Permit permit_;
  Timer timer_;
  bool ended_ = false;
};

}  // namespace levee::proxy
