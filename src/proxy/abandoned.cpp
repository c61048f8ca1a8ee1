#include "proxy/abandoned.hpp"

namespace levee::proxy {

AbandonedAttempt::AbandonedAttempt(Worker& w, const Runtime& rt, Endpoint& ep, std::unique_ptr<UpstreamConn> up,
                                   Permit permit, FuseSlot slot)
    : pin_(w, &rt),
      outstanding_(ep),
      permit_(std::move(permit)),
      slot_(std::move(slot)),
      up_(std::move(up)),
      timer_(w.ctx.get_executor()) {}

void AbandonedAttempt::start(Worker& w, const Runtime& rt, Endpoint& ep, std::unique_ptr<UpstreamConn> up,
                             Permit permit, FuseSlot slot, core::TimePoint until) {
  // Bytes of an answer already read: the backend is done with it.
  if (up->buf.size() > 0 || until <= now()) return;
  auto a = std::make_shared<AbandonedAttempt>(w, rt, ep, std::move(up), std::move(permit), std::move(slot));
  a->up_->stream.shutdown_send();
  a->timer_.expires_after(std::chrono::duration_cast<Timer::duration>(until - now()));
  a->timer_.async_wait([a](error_code ec) {
    if (!ec) a->end();
  });
  a->wait();
}

void AbandonedAttempt::wait() {
  // Readable: the answer begins, or the backend closed or reset. A TLS
  // record that held no data (a session ticket, a key update) is neither.
  up_->stream.wait_readable([a = shared_from_this()](error_code ec) {
    if (a->ended_) return;
    if (!ec && a->up_->stream.poll(a->up_->buf) == Stream::Poll::Nothing) return a->wait();
    a->end();
  });
}

void AbandonedAttempt::end() noexcept {
  if (std::exchange(ended_, true)) return;
  timer_.cancel();
  up_->stream.cancel();  // the other wait, if it has not fired
  up_.reset();
  slot_.reset();
  permit_.reset();
}

}  // namespace levee::proxy
