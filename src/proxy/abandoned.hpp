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
// pooled. Until then the endpoint counts the request as outstanding (the
// balancer sees it busy), and a fuse slot stays taken with the fuse's
// connection. (Over HTTP/2 the backend is told, with RST_STREAM, and the
// permit comes back at once.)
#pragma once

#include <memory>

#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/cluster.hpp"
#include "proxy/endpoint.hpp"
#include "proxy/fuse.hpp"
#include "proxy/upstream.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

class Runtime;

class AbandonedAttempt : public std::enable_shared_from_this<AbandonedAttempt> {
 public:
  /// Holds `permit` (of a cluster of `rt`) and `slot` until the backend
  /// `ep` on `up` is done, or until `until`.
  static void start(Worker& w, const Runtime& rt, Endpoint& ep, std::unique_ptr<UpstreamConn> up, Permit permit,
                    FuseSlot slot, core::TimePoint until);

  AbandonedAttempt(Worker& w, const Runtime& rt, Endpoint& ep, std::unique_ptr<UpstreamConn> up, Permit permit,
                   FuseSlot slot);

 private:
  void wait();
  void end() noexcept;

  // Destroyed in reverse: the connection closes before the fuse slot and
  // the permit come back, and the Runtime is let go last.
  Worker::Pin pin_;  ///< the Runtime whose cluster the permit is of
  Outstanding outstanding_;
  Permit permit_;
  FuseSlot slot_;
  std::unique_ptr<UpstreamConn> up_;
  Timer timer_;
  bool ended_ = false;
};

}  // namespace levee::proxy
