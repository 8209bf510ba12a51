// SPDX-License-Identifier: Apache-2.0
// TCP socket options of both sides of every spliced connection: set on each upstream socket (at most
// kUpstreamOptionsMs after its connect, Server::upstream_options_deferred), and on the listening
// sockets, whose accepted sockets inherit them (Linux copies TCP_NODELAY, SO_KEEPALIVE, the
// keepalive timings and TCP_USER_TIMEOUT to each accepted socket), so an accept costs no setsockopt.
#pragma once

#include "kprism/config/config.h"

namespace kprism {

// TCP_NODELAY, SO_KEEPALIVE (+ idle/interval/count) and TCP_USER_TIMEOUT as configured. A fresh
// socket gets only what differs from the kernel's defaults; `listener` sets every option
// explicitly, so a reload that turns one off turns it off for the connections accepted after it.
// Best effort: failures are not fatal for the connection. Returns 0 or the first error.
// `with_nodelay` false leaves TCP_NODELAY out (already set; see set_tcp_nodelay).
int apply_tcp_options(int fd, const Settings& s, bool listener = false, bool with_nodelay = true);

// TCP_NODELAY alone (when tcp.nodelay is on): before an upstream socket's second write, the first
// that Nagle's algorithm could hold back. Returns whether it is set.
bool set_tcp_nodelay(int fd, const Settings& s);

// TCP_QUICKACK off, on an upstream socket before its connect: the kernel holds the handshake's last
// ACK for the first bytes sent to carry (or its delayed-ACK timer, at most 200 ms), so the upstream
// gets one segment fewer and takes the connection with the bytes already there. The apiserver does
// not speak first (TLS: the client's hello opens), so it waits for nothing. Returns whether it is set.
bool hold_handshake_ack(int fd);

// The socket has reached TCP_CLOSE (TCP_INFO's tcpi_state): on a socket whose peer's FIN was read
// and that has sent no FIN itself (CLOSE_WAIT), only the peer's RST or a keepalive or user
// timeout gets it there. Reading does not show it (recv() returns 0 after a FIN whatever follows).
bool tcp_closed(int fd);

}  // namespace kprism
