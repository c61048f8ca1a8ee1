#include "control/systemd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace levee::control {

bool sd_notify(std::string_view state) {
  const char* name = std::getenv("NOTIFY_SOCKET");
  if (name == nullptr || name[0] == '\0') return false;
  const std::size_t len = std::strlen(name);
  sockaddr_un addr{};
  // Only filesystem paths and abstract names; systemd 253's vsock: form is
  // for virtual machines, which levee is not.
  if ((name[0] != '/' && name[0] != '@') || len >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name, len);
  if (name[0] == '@') addr.sun_path[0] = '\0';
  // An abstract address is exactly its bytes (no terminating NUL counts).
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);

  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), addr_len);
  ::close(fd);
  return n == static_cast<ssize_t>(state.size());
}

bool notify_ready(std::string_view status) {
  std::string msg = "READY=1";
  if (!status.empty()) {
    msg += "\nSTATUS=";
    msg += status;
  }
  return sd_notify(msg);
}

bool notify_reloading() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const auto usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                    static_cast<unsigned long long>(ts.tv_nsec) / 1000ULL;
  return sd_notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

bool notify_stopping() { return sd_notify("STOPPING=1"); }

}  // namespace levee::control
