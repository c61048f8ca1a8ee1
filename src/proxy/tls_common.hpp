// What the listeners' and the clusters' TLS contexts share: OpenSSL's
// error reason, configuration errors naming the file, the protocol
// version and the ALPN list in wire format. Internal to src/proxy/tls_*.cpp.
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace levee::proxy::tls_detail {

/// OpenSSL's most recent reason, and the thread's queue cleared.
inline std::string openssl_reason() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  const char* r = ERR_reason_error_string(e);
  return r ? r : "OpenSSL error " + std::to_string(e);
}

struct Errors {
  const std::string& source;
  std::vector<config::Error>& out;
  void add(const config::Place& p, std::string msg) {
    out.push_back(config::Error{source, p.line, p.column, p.path, std::move(msg)});
  }
  /// The file can be opened: else an error that says why.
  bool readable(const config::Place& p, const std::string& file, const char* what) {
    std::ifstream f(file, std::ios::binary);
    if (f) return true;
    add(p, std::string("cannot read ") + what + " '" + file + "': " + std::strerror(errno));
    return false;
  }
};

inline int version(config::TlsVersion v) { return v == config::TlsVersion::V1_3 ? TLS1_3_VERSION : TLS1_2_VERSION; }

/// The ALPN list in wire format (length-prefixed names).
inline std::string alpn_wire(const std::vector<std::string>& names) {
  std::string w;
  for (const auto& n : names) {
    w.push_back(static_cast<char>(n.size()));
    w += n;
  }
  return w;
}

}  // namespace levee::proxy::tls_detail
