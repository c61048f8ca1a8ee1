// A client connection's place in the process's count of returning clients
// (ProcessState::returning_clients): taken once the connection has been
// served and stays open for more, given back when it is destroyed. Full TLS
// handshakes are shed under load only while there are such clients to
// protect (docs/edge.md).
#pragma once

#include <memory>

namespace levee::proxy {

struct ProcessState;

class ReturningClient {
 public:
  ReturningClient() = default;
  ReturningClient(const ReturningClient&) = delete;
  ReturningClient& operator=(const ReturningClient&) = delete;
  ~ReturningClient();
  /// Counts this connection (once).
  void mark(const std::shared_ptr<ProcessState>& process) noexcept;

 private:
  std::shared_ptr<ProcessState> process_;
};

}  // namespace levee::proxy
