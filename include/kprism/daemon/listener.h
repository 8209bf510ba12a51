// SPDX-License-Identifier: Apache-2.0
// A bound, listening TCP socket that hands each accepted client to a new Connection.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <string>

#include "kprism/base/address_rules.h"

namespace kprism {

class Server;

// Owned by the Server, which closes it on shutdown and frees it after the loop has stopped.
struct Listener {
    uv_tcp_t tcp{};
    Server* srv = nullptr;
    std::string name;
    bool open = false;

    // Binds and listens; returns 0 or a libuv error code.
    int start(uv_loop_t* loop, Server* server, const sockaddr* addr);
    // Listens on an already listening socket (passed by systemd; see inspect_listen_fd). Takes
    // ownership of `fd` whatever it returns: 0 or a libuv error code.
    int start_fd(uv_loop_t* loop, Server* server, int fd);
    void close();
};

// The two ways a libuv listener starts, shared by the data listeners and the admin endpoint.
// `open` is set as soon as `tcp` needs uv_close; `tcp.data` is set to `data` before listening.
// Returns 0 or a libuv error code.
int listen_on(uv_loop_t* loop, uv_tcp_t& tcp, bool& open, void* data, const sockaddr* addr, int backlog,
              uv_connection_cb cb);
// For a socket that is already listening (socket activation): takes ownership of `fd` whatever
// it returns, and fills `name` with its local address.
int listen_on_fd(uv_loop_t* loop, uv_tcp_t& tcp, bool& open, void* data, int fd, int backlog, uv_connection_cb cb,
                 std::string& name);

// Is `fd` a listening TCP socket (IPv4 or IPv6)? Then fills `addr` with its local address;
// otherwise returns false with a message in `error`.
bool inspect_listen_fd(int fd, sockaddr_storage& addr, std::string& error);

// The address a listening handle is bound to (uv_tcp_getsockname) and whether an IPv6 one takes
// IPv6 only; false if the socket cannot be asked.
bool bound_listener(const uv_tcp_t& tcp, OwnListener& out);

}  // namespace kprism
