#include "proxy/abandoned.hpp"

namespace levee::proxy {

AbandonedAttempt::AbandonedAttempt(Worker& w, const Runtime& rt, std::unique_ptr<UpstreamConn> up, Permit permit)
    : pin_(w, &rt), up_(std::move(up)), permit_(std::move(permit)), timer_(w.ctx.get_executor()) {}

void AbandonedAttempt::start(Worker& w, const Runtime& rt, std::unique_ptr<UpstreamConn> up, Permit permit,
                             core::TimePoint until) {
  // Bytes of an answer already read: the backend is done with it.
  if (up->buf.size() > 0 || until <= now()) return;
  auto a = std::make_shared<AbandonedAttempt>(w, rt, std::move(up), std::move(permit));
  a->up_->stream.shutdown_send();
  a->timer_.expires_after(std::chrono::duration_cast<Timer::duration>(until - now()));
  a->timer_.async_wait([a](error_code ec) {
    if (!ec) a->end();
  });
  // Readable: the answer begins, or the backend closed or reset.
  a->up_->stream.wait_readable([a](error_code) { a->end(); });
}

void AbandonedAttempt::end() noexcept {
  if (std::exchange(ended_, true)) return;
  timer_.cancel();
  up_->stream.cancel();  // the other wait, if it has not fired
  permit_.reset();
}

}  // namespace levee::proxy
