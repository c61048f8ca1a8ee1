// Certificates and keys reloaded when their files change, without a config
// reload: once a second (the history tick, on the admin thread) the files
// the running config names are stat()ed; a change that has held still for a
// tick (a writer done, or a Kubernetes secret's symlink swap) rebuilds the
// Runtime from the same config, which loads them again. A bad new file
// fails that rebuild, which is logged, and the old certificates stay in use;
// the next change tries again. Only new connections see the new files.
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include "control/server.hpp"
#include "proxy/clock.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"

namespace levee::control {

namespace {

void add_stamp(std::string& out, const std::string& path) {
  if (path.empty()) return;
  struct stat st {};
  out += path;
  // stat() follows symlinks: a secret volume's "..data" swap shows as a new inode.
  if (::stat(path.c_str(), &st) != 0) {
    out += ":missing;";
    return;
  }
  out += ':' + std::to_string(st.st_ino) + ':' + std::to_string(st.st_size) + ':' +
         std::to_string(st.st_mtim.tv_sec) + '.' + std::to_string(st.st_mtim.tv_nsec) + ';';
}

}  // namespace

std::string tls_files_stamp(const config::Config& c) {
  std::string s;
  for (const auto& l : c.listeners) {
    if (!l.tls.enabled) continue;
    for (const auto& cert : l.tls.certificates) {
      add_stamp(s, cert.cert_file);
      add_stamp(s, cert.key_file);
      add_stamp(s, cert.ocsp_file);
    }
    add_stamp(s, l.tls.client_auth.ca_file);
    add_stamp(s, l.tls.client_auth.crl_file);
    add_stamp(s, l.tls.session_ticket_keys_file);
  }
  for (const auto& cl : c.clusters)
    if (cl.tls.enabled) {
      add_stamp(s, cl.tls.ca_file);
      add_stamp(s, cl.tls.cert_file);
      add_stamp(s, cl.tls.key_file);
    }
  return s;
}

void Server::rotate_ticket_keys() {
  const auto t = proxy::now();
  for (const auto& l : rt_->listeners)
    if (l->tls && l->tls->rotate_ticket_keys(t)) ticket_rotations_.inc(0, 0);
}

void Server::watch_tls_files() {
  if (!cfg_->tls_watch) return;
  std::string now = tls_files_stamp(*cfg_);
  if (now == tls_stamp_) {
    tls_pending_.clear();
    return;
  }
  // Changed: wait until it holds still for a tick (a file written in place
  // may be half written now).
  if (now != tls_pending_) {
    tls_pending_ = std::move(now);
    return;
  }
  tls_stamp_ = std::move(now);
  tls_pending_.clear();
  spdlog::info("TLS files changed: loading the certificates again");
  schedule_rebuild("TLS files changed");
}

}  // namespace levee::control
