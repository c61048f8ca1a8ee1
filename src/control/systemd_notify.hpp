// Readiness and lifecycle notifications to systemd (sd_notify(3)'s
// protocol, without linking libsystemd): one datagram of NEWLINE-separated
// KEY=VALUE assignments to the AF_UNIX socket named by $NOTIFY_SOCKET.
// Outside systemd (no $NOTIFY_SOCKET) every call does nothing.
#pragma once

#include <string_view>

namespace levee::control {

/// Sends `state` ("READY=1", ...) to $NOTIFY_SOCKET. A name starting with
/// '@' is in the abstract namespace. Returns false when there is no socket
/// or the send failed; the caller carries on either way (systemd then
/// times the start out, which is the right outcome for a broken socket).
bool sd_notify(std::string_view state);

/// Every listener and the admin port are bound: Type=notify units count as
/// started from here. `status` is shown by `systemctl status`.
bool notify_ready(std::string_view status = {});
/// A reload begins (RELOADING=1 with the CLOCK_MONOTONIC timestamp that
/// Type=notify-reload asks for); follow with notify_ready() when done.
bool notify_reloading();
/// A drain begins: systemd shows "deactivating" until the process exits.
bool notify_stopping();

}  // namespace levee::control
