// One request stream of an HTTP/2 connection: the Downstream its Exchange
// reads the request from and answers through. Its head is filled from the
// header block as nghttp2 decodes it; its body arrives in DATA frames and
// waits here (bounded by the stream's window) until the exchange takes it;
// its answer is fed to nghttp2's data provider one piece at a time, each
// send completing once the piece has been handed to the socket.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/h2_reply.hpp"
#include "http/h2_request.hpp"
#include "proxy/downstream.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/unread_bytes.hpp"
#include "proxy/watchdog.hpp"

namespace levee::proxy {

class Http2Connection;

class H2Stream final : public Downstream, public Watchdog::Target {
 public:
  H2Stream(Http2Connection& c, std::int32_t id, std::unique_ptr<ExchangeBuffers> b);
  ~H2Stream();

  // Decoding the request (from the session's callbacks).
  /// One header field; false: reset the stream (far past the size limit).
  bool on_header(std::string_view name, std::string_view value);
  void on_headers_done(bool end_stream);
  void on_data(const char* data, std::size_t n);
  void on_end_stream();
  /// The session closed the stream (answered, or reset by either side).
  void on_close(std::uint32_t error_code);
  /// nghttp2's data provider: copies what is pending of the answer.
  long read_answer(std::uint8_t* buf, std::size_t length, std::uint32_t* flags);
  /// The piece handed to nghttp2 is now in the socket.
  void on_piece_written();

  awaitable<void> run(std::shared_ptr<Http2Connection> keep);

  // Downstream
  const Peer& peer() const noexcept override;
  bool has_body() const noexcept override { return req_.has_body(); }
  std::optional<std::uint64_t> body_length() const noexcept override { return req_.length(); }
  bool body_done() const noexcept override { return end_in_ && in_.empty(); }
  awaitable<BodyRead> read_body() override;
  awaitable<bool> send_continue() override;
  Sent send_response(const ResponseStart& r, std::string_view first, bool last) override;
  Sent send_body(std::string_view piece, bool last) override;
  awaitable<bool> finish_send() override;
  awaitable<bool> send_trailers(const http::Head& trailers, bool strip_inside) override;
  awaitable<bool> send_local(http::LocalReply& r) override;
  void watch(ClientWatch& w) override;
  void unwatch() noexcept override;
  void queued(bool q) noexcept override;
  void cancel_io() noexcept override;
  std::pair<std::uint64_t, std::uint64_t> take_bytes() noexcept override {
    return {std::exchange(rx_, 0), std::exchange(tx_, 0)};
  }
  void on_deadline(Watchdog::Phase) noexcept override { cancel_io(); }

  bool started = false;          ///< its exchange runs (or ran)
  bool exchange_done = false;
  /// Its reset, if any, is counted already (the client's RST_STREAM) or
  /// is levee's own; any other reset before an answer is one nghttp2 made
  /// for a broken frame of the client's, and counts as the client's.
  bool reset_accounted = false;
  bool closed() const noexcept { return closed_; }
  bool answered() const noexcept { return response_done_; }

 private:
  struct Wait {
    Timer timer;
    bool waiting = false;
    bool aborted = false;
  };
  static constexpr std::size_t kRead = 0, kWrite = 1;
  /// Waits for a notify() (data, a written piece, the stream's end, a cancel).
  awaitable<void> wait(Wait& w);
  void notify() noexcept {
    for (auto& w : waits_) w.timer.cancel();
  }
  /// Hands `piece` to the provider and waits until it is in the socket.
  awaitable<bool> send_piece();
  /// When the n-th byte from `start` is due at the listener's minimum rate.
  core::TimePoint rate_deadline(core::TimePoint start, std::uint64_t bytes) const noexcept;
  Sent submit(const http::H2Fields& fields, bool with_body);
  void format_client();

  Http2Connection& c_;
  const std::int32_t id_;
  std::unique_ptr<ExchangeBuffers> b_;
  std::array<Wait, 2> waits_;  ///< [kRead] the body read, [kWrite] the answer's writes
  core::TimePoint start_{};
  ClientWatch* watcher_ = nullptr;
  bool queued_ = false;  ///< its exchange waits in admission (counted in the connection's queued_)
  // The request.
  http::H2RequestDecoder req_;
  bool end_in_ = false;
  core::TimePoint body_start_{};  ///< the exchange's first body read (the upload's rate counts from it)
  std::uint64_t body_taken_ = 0;
  UnreadBytes in_;  ///< received body the exchange has not taken
  // The answer.
  std::string_view piece_;
  std::size_t piece_off_ = 0;
  bool piece_last_ = false;
  bool piece_written_ = false;
  bool response_started_ = false;
  bool response_done_ = false;
  bool trailers_pending_ = false;
  // State.
  bool closed_ = false;
  std::uint64_t rx_ = 0;
  std::uint64_t tx_ = 0;
};

}  // namespace levee::proxy
