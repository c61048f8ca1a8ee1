#include "quota/redis_link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace levee::quota {

namespace {

std::string ssl_error_text() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

int remaining_ms(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// redisReply (hiredis's tree) into core's value type.
core::RedisReply convert(const redisReply* r, int depth = 0) {
  core::RedisReply out;
  using T = core::RedisReply::Type;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = T::String; break;
    case REDIS_REPLY_STATUS: out.type = T::Status; break;
    case REDIS_REPLY_ERROR: out.type = T::Error; break;
    case REDIS_REPLY_INTEGER: out.type = T::Integer; break;
    case REDIS_REPLY_ARRAY: out.type = T::Array; break;
    default: out.type = T::Nil; break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
    out.str.assign(r->str, r->len);
  out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY && depth < 8) {
    out.elements.reserve(r->elements);
    for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i], depth + 1));
  }
  return out;
}

bool is_ip_literal(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

TlsContext::TlsContext(const config::RedisTlsConfig& cfg) : cfg_(cfg) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (!ctx_) throw std::runtime_error("quota_sync.redis.tls: " + ssl_error_text());
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  if (cfg_.verify) {
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    int ok = cfg_.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx_)
                                  : SSL_CTX_load_verify_locations(ctx_, cfg_.ca_file.c_str(), nullptr);
    if (ok != 1) {
      std::string why = ssl_error_text();
      SSL_CTX_free(ctx_);
      throw std::runtime_error("quota_sync.redis.tls.ca_file: cannot load '" + cfg_.ca_file + "': " + why);
    }
  } else {
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
  }
  if (!cfg_.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx_, cfg_.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx_, cfg_.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx_) != 1) {
      std::string why = ssl_error_text();
      SSL_CTX_free(ctx_);
      throw std::runtime_error("quota_sync.redis.tls: cannot use the client certificate '" + cfg_.cert_file + "': " + why);
    }
  }
}

TlsContext::~TlsContext() {
  if (ctx_) SSL_CTX_free(ctx_);
}

RedisLink::RedisLink(const TlsContext* tls) : tls_(tls) {}

RedisLink::~RedisLink() { close(); }

void RedisLink::close() noexcept {
  if (ssl_) {
    SSL_free(ssl_);  // no close_notify round trip: the socket goes anyway
    ssl_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (reader_) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
}

LinkResult RedisLink::fail(LinkError e, std::string what) {
  close();
  return {e, peer_ + ": " + what};
}

LinkResult RedisLink::wait(bool for_write, Deadline deadline) {
  pollfd p{fd_, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  for (;;) {
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return {};
    if (n == 0) return fail(LinkError::Timeout, for_write ? "timed out writing" : "timed out waiting for a reply");
    if (errno != EINTR) return fail(LinkError::Closed, std::strerror(errno));
  }
}

LinkResult RedisLink::connect(const std::string& host, std::uint16_t port, Deadline deadline) {
  close();
  peer_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = is_ip_literal(host) ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  // Name resolution has no timeout of its own; it runs on the sync thread,
  // never on a worker. IP literals skip it.
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return fail(LinkError::Connect, std::string("cannot resolve: ") + gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd_ = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd_ < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, ai->ai_addr, ai->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      pollfd p{fd_, POLLOUT, 0};
      int n;
      do n = ::poll(&p, 1, remaining_ms(deadline));
      while (n < 0 && errno == EINTR);
      int err = 0;
      socklen_t len = sizeof err;
      if (n > 0 && ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) break;
      last = n == 0 ? "connect timed out" : std::strerror(err ? err : errno);
      if (n == 0) {
        ::freeaddrinfo(res);
        return fail(LinkError::Timeout, last);
      }
    } else {
      last = std::strerror(errno);
    }
    ::close(fd_);
    fd_ = -1;
  }
  ::freeaddrinfo(res);
  if (fd_ < 0) return fail(LinkError::Connect, last);

  if (tls_) {
    ssl_ = SSL_new(tls_->get());
    if (!ssl_) return fail(LinkError::Connect, ssl_error_text());
    SSL_set_fd(ssl_, fd_);
    const std::string& name = tls_->cfg().server_name.empty() ? host : tls_->cfg().server_name;
    // SNI (SSL_set_tlsext_host_name is a macro with a C cast around this).
    if (!is_ip_literal(name))
      SSL_ctrl(ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(name.c_str()));
    if (tls_->cfg().verify) {
      X509_VERIFY_PARAM* vp = SSL_get0_param(ssl_);
      if (is_ip_literal(name)) X509_VERIFY_PARAM_set1_ip_asc(vp, name.c_str());
      else X509_VERIFY_PARAM_set1_host(vp, name.c_str(), 0);
    }
    for (;;) {
      int r = SSL_connect(ssl_);
      if (r == 1) break;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (auto w = wait(e == SSL_ERROR_WANT_WRITE, deadline); !w) return w;
        continue;
      }
      long v = SSL_get_verify_result(ssl_);
      std::string why = v != X509_V_OK ? X509_verify_cert_error_string(v) : ssl_error_text();
      return fail(LinkError::Connect, "TLS handshake failed: " + why);
    }
  }
  reader_ = redisReaderCreate();
  if (!reader_) return fail(LinkError::Connect, "out of memory");
  return {};
}

LinkResult RedisLink::write_all(const std::string& data, Deadline deadline) {
  std::size_t off = 0;
  while (off < data.size()) {
    if (ssl_) {
      int n = SSL_write(ssl_, data.data() + off, static_cast<int>(std::min<std::size_t>(data.size() - off, 1 << 30)));
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      int e = SSL_get_error(ssl_, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (auto w = wait(e == SSL_ERROR_WANT_WRITE, deadline); !w) return w;
        continue;
      }
      return fail(LinkError::Closed, "TLS write: " + ssl_error_text());
    }
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (auto w = wait(true, deadline); !w) return w;
      continue;
    }
    return fail(LinkError::Closed, n == 0 ? "closed" : std::strerror(errno));
  }
  bytes_out_ += data.size();
  return {};
}

LinkResult RedisLink::read_some(Deadline deadline) {
  char buf[16384];
  for (;;) {
    if (ssl_) {
      int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) {
        bytes_in_ += static_cast<std::uint64_t>(n);
        redisReaderFeed(reader_, buf, static_cast<std::size_t>(n));
        return {};
      }
      int e = SSL_get_error(ssl_, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (auto w = wait(e == SSL_ERROR_WANT_WRITE, deadline); !w) return w;
        continue;
      }
      if (e == SSL_ERROR_ZERO_RETURN) return fail(LinkError::Closed, "closed by the server");
      return fail(LinkError::Closed, "TLS read: " + ssl_error_text());
    }
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      bytes_in_ += static_cast<std::uint64_t>(n);
      redisReaderFeed(reader_, buf, static_cast<std::size_t>(n));
      return {};
    }
    if (n == 0) return fail(LinkError::Closed, "closed by the server");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (auto w = wait(false, deadline); !w) return w;
      continue;
    }
    return fail(LinkError::Closed, std::strerror(errno));
  }
}

LinkResult RedisLink::roundtrip(const std::vector<core::RedisCommand>& cmds, std::vector<core::RedisReply>& out,
                                Deadline deadline) {
  out.clear();
  if (fd_ < 0) return {LinkError::Closed, peer_ + ": not connected"};
  out_.clear();
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& c : cmds) {
    argv.clear();
    lens.clear();
    for (const auto& a : c) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* formatted = nullptr;
    int n = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (n < 0) return fail(LinkError::Protocol, "cannot format a command");
    out_.append(formatted, static_cast<std::size_t>(n));
    redisFreeCommand(formatted);
  }
  if (auto w = write_all(out_, deadline); !w) return w;
  out.reserve(cmds.size());
  // Bounded in time and bytes even against a peer that never stops
  // sending: read_some() returns whenever data arrived, so the deadline is
  // checked here too, and the replies of one round trip are capped (what
  // the sync asks for is a few hash reads of known fields).
  const std::uint64_t in_at_start = bytes_in_;
  while (out.size() < cmds.size()) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK)
      return fail(LinkError::Protocol, std::string("not a Redis reply: ") + reader_->errstr);
    if (reply) {
      out.push_back(convert(static_cast<redisReply*>(reply)));
      freeReplyObject(reply);
      continue;
    }
    if (bytes_in_ - in_at_start > kMaxReplyBytes)
      return fail(LinkError::Protocol, "replies over " + std::to_string(kMaxReplyBytes >> 20) + " MiB");
    if (std::chrono::steady_clock::now() >= deadline) return fail(LinkError::Timeout, "timed out reading replies");
    if (auto r = read_some(deadline); !r) return r;
  }
  // Bytes beyond the last reply: the connection is out of step with its
  // commands (every later reply would answer the wrong one).
  if (reader_->pos < reader_->len) return fail(LinkError::Protocol, "more replies than commands");
  return {};
}

}  // namespace levee::quota
