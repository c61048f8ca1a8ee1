// HTTP/2 towards a cluster's endpoints (protocol: http2; docs/http2.md):
// the connection gRPC backends need. A worker keeps a few multiplexed
// connections per endpoint (H2UpstreamPool) and each request is one stream
// on one of them (H2Call), driven by the same Exchange as an HTTP/1.1
// attempt.
//
// A connection connects itself (TCP, then TLS with ALPN h2 when the cluster
// has TLS) while the first streams already wait on its session, so a burst
// opens one connection, not one per request. Streams beyond what the
// backend allows at once (its SETTINGS_MAX_CONCURRENT_STREAMS) wait in
// nghttp2's own queue, never sent until there is room.
//
// Flow control follows the exchange: the connection window is given back
// as DATA arrives, a stream's only as the exchange takes its bytes, so a
// client that reads slowly holds at most one stream window of its answer.
//
// A stream the backend refused (REFUSED_STREAM, or beyond a GOAWAY's last
// stream) or that never left levee is safe to send again; one that was
// sent and then reset is not, unless the request is idempotent.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/time.hpp"
#include "http/message.hpp"
#include "proxy/asio.hpp"
#include "proxy/stream.hpp"
#include "proxy/unread_bytes.hpp"

struct nghttp2_session;

namespace levee::http {
struct ResponseSignals;
}

namespace levee::proxy {

class ClientTls;
class Cluster;
class Runtime;
class Worker;
class H2Upstream;

/// One request's stream. Kept with the exchange's buffers (pooled per
/// worker), so its buffers are reused from one request to the next.
class H2Call {
 public:
  explicit H2Call(Executor ex) : trailers(64), ev_(ex), body_ev_(ex) {}
  H2Call(const H2Call&) = delete;
  H2Call& operator=(const H2Call&) = delete;
  ~H2Call();

  /// Ready for a new attempt whose response head goes into head/info.
  void begin(http::Head& head, http::ResponseInfo& info, const http::ResponseSignals& signals, std::size_t max_bytes);
  /// Submits the request on c. `body`: a body follows (send_body). False:
  /// the session took nothing (the connection is going away).
  bool open(std::shared_ptr<H2Upstream> c, std::string& head_text, bool tls, bool body);
  /// Hands a piece of the request body to the stream; waits until it has
  /// been copied out (the caller's buffer may then be reused). `last`: the
  /// body ends with it. False: the stream ended or the wait was aborted;
  /// or, with stop_on_head, the response head arrived first, and the piece
  /// is still pending (finish_piece, with the caller's buffer unchanged).
  awaitable<bool> send_body(std::string_view piece, bool last, bool stop_on_head);
  awaitable<bool> finish_piece();
  /// A piece is handed over and not yet copied out.
  bool piece_pending() const noexcept { return !piece_taken_; }
  /// The piece handed over (pending or not) ends the body.
  bool piece_last() const noexcept { return piece_last_; }
  /// Waits for the response head, more body, the end or a failure.
  awaitable<void> wait();
  /// Ends a wait now (a deadline, the client gone).
  void abort() noexcept;
  /// Body bytes that arrived and are not taken yet.
  std::string_view pending() const noexcept { return in_.view(); }
  /// The exchange took n bytes of pending(): the backend may send as much again.
  void take(std::size_t n) noexcept;
  /// Stops the stream (RST_STREAM CANCEL if it is still open) and lets go of its connection.
  void release() noexcept;

  bool head_done() const noexcept { return head_done_; }
  bool ended() const noexcept { return end_; }  ///< END_STREAM arrived
  /// END_STREAM came on the response head itself (gRPC's Trailers-Only).
  bool ended_on_head() const noexcept { return end_on_head_; }
  bool closed() const noexcept { return closed_; }
  bool aborted() const noexcept { return aborted_; }
  /// Whether any of the request reached the connection's socket.
  bool sent() const noexcept { return sent_; }
  /// Safe to try again elsewhere: refused by the backend, or never sent.
  bool refused() const noexcept { return refused_ || !sent_; }
  /// Connecting (TCP or TLS) failed; nothing was sent.
  bool connect_failed() const noexcept;
  bool reused() const noexcept { return reused_; }
  std::uint32_t error() const noexcept { return error_; }
  bool body_bad() const noexcept { return bad_; }  ///< the response broke a rule (reset by levee)
  http::Head trailers;  ///< trailer fields of the response, as they came

  /// While the request body streams: told when the backend answers or
  /// ends the stream, so that the client's body read can stop.
  void on_spoke(void (*f)(void*), void* arg) noexcept {
    spoke_ = f;
    spoke_arg_ = arg;
  }

 private:
  friend class H2Upstream;
  friend struct H2UpCallbacks;
  void notify() noexcept;
  awaitable<void> wait_on(Timer& t);
  long read_body(std::uint8_t* buf, std::size_t length, std::uint32_t* flags);
  bool settle_piece() noexcept;

  Timer ev_;       ///< the relay's waits (head, body, end)
  Timer body_ev_;  ///< the request body's waits (a piece taken)
  std::shared_ptr<H2Upstream> conn_;
  std::int32_t id_ = -1;
  http::Head* head_ = nullptr;
  http::ResponseInfo* info_ = nullptr;
  const http::ResponseSignals* signals_ = nullptr;
  std::size_t max_bytes_ = 64 * 1024;
  std::size_t header_bytes_ = 0;
  UnreadBytes in_;  ///< the answer's body, received and not yet relayed
  std::string_view piece_;
  std::size_t piece_off_ = 0;
  bool piece_last_ = false;
  bool piece_taken_ = true;
  bool has_body_ = false;
  bool head_done_ = false;
  bool end_on_head_ = false;
  bool end_ = false;
  bool closed_ = false;
  bool refused_ = false;
  bool sent_ = false;
  bool reused_ = false;
  bool bad_ = false;
  bool aborted_ = false;
  std::uint32_t error_ = 0;
  void (*spoke_)(void*) = nullptr;
  void* spoke_arg_ = nullptr;
};

/// One HTTP/2 connection to one endpoint, shared by the streams on it.
class H2Upstream : public std::enable_shared_from_this<H2Upstream> {
 public:
  struct Options {
    std::vector<tcp::endpoint> addresses;
    std::shared_ptr<const ClientTls> tls;  ///< null: cleartext (prior knowledge)
    std::string host;                      ///< SNI and the name verified
    core::Duration connect_timeout{};
    core::Duration idle_timeout{};
    /// A write the backend does not take within this ends the connection
    /// (its calls fail): a backend that stops reading stalls every stream.
    core::Duration write_timeout = std::chrono::seconds(30);
    std::uint32_t max_streams = 256;
    std::uint32_t initial_window = 64 * 1024;
    std::uint64_t generation = 0;  ///< the endpoint's address generation
  };
  H2Upstream(Executor ex, Options o);
  ~H2Upstream();
  H2Upstream(const H2Upstream&) = delete;
  H2Upstream& operator=(const H2Upstream&) = delete;

  /// Connects and runs the session; `connected(ok)` is called once the
  /// connection is up (or failed), for counting.
  void start(std::function<void(bool)> connected);
  /// Streams open on it (or queued in its session).
  std::size_t streams() const noexcept { return calls_.size(); }
  /// It takes new streams: not failed, not going away.
  bool usable() const noexcept { return !dead_ && !goaway_; }
  /// Below the number of streams the backend allows at once.
  bool has_room() const noexcept;
  std::uint64_t generation() const noexcept { return o_.generation; }
  core::TimePoint idle_since() const noexcept { return idle_since_; }
  core::Duration idle_timeout() const noexcept { return o_.idle_timeout; }
  /// No new streams; it closes when the open ones are done.
  void retire() noexcept;
  /// Retires once its streams are done (a connection outside the pool).
  void retire_when_idle() noexcept;
  bool finished() const noexcept { return finished_; }

 private:
  friend class H2Call;
  friend struct H2UpCallbacks;
  awaitable<void> run(std::shared_ptr<H2Upstream> self, std::function<void(bool)> connected);
  awaitable<void> reader();
  awaitable<void> writer();
  void kick() noexcept { wake_.cancel(); }
  void detach(H2Call& c) noexcept;

  Options o_;
  Stream stream_;
  nghttp2_session* s_ = nullptr;
  Timer wake_;
  Timer connect_timer_;
  Timer write_timer_;
  std::vector<char> rbuf_;
  std::string out_;
  std::uint64_t consume_conn_ = 0;
  std::vector<H2Call*> calls_;  ///< streams open on it (or queued in its session)
  core::TimePoint idle_since_{};
  bool connected_ = false;
  bool connect_failed_ = false;
  bool dead_ = false;
  bool goaway_ = false;
  bool finished_ = false;
  bool one_shot_ = false;
};

/// A worker's HTTP/2 connections, per cluster and endpoint of its Runtime.
class H2UpstreamPool {
 public:
  /// A connection for a new stream to (c, endpoint): one with room, else a
  /// new one while fewer than max_connections exist, else the least busy
  /// (its session queues the stream). `fresh` tells which.
  std::shared_ptr<H2Upstream> get(Worker& w, const Cluster& c, std::size_t endpoint, bool& fresh);
  /// Closes connections idle past their idle_timeout; forgets finished ones.
  void sweep(core::TimePoint now);
  /// A reload or a drain: every connection finishes its streams and closes.
  void retire_all() noexcept;

 private:
  std::map<std::pair<const Cluster*, std::size_t>, std::vector<std::shared_ptr<H2Upstream>>> conns_;
};

}  // namespace levee::proxy
