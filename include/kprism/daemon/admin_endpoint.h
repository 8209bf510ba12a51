// SPDX-License-Identifier: Apache-2.0
// The admin endpoint as the daemon sees it: a listener it starts, names and closes. What the
// endpoint serves (admin/admin.h) reads the daemon; the daemon never includes it.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>

namespace kprism {

class Server;

class AdminEndpoint {
public:
    virtual ~AdminEndpoint() = default;
    // Binds and listens; returns 0 or a libuv error code (then close() it).
    virtual int start(uv_loop_t* loop, const sockaddr* addr) = 0;
    // Listens on an already listening socket (passed by systemd). Takes ownership of `fd`
    // whatever it returns: 0 or a libuv error code (then close() it).
    virtual int start_fd(uv_loop_t* loop, int fd) = 0;
    // Stops listening and closes every admin connection. Idempotent. The object stays alive (the
    // Server keeps it) until the loop has run the close callbacks.
    virtual void close() = 0;
    virtual const std::string& name() const = 0;
    // The listening handle, once started; else nullptr.
    virtual const uv_tcp_t* handle() const = 0;
};

// Builds the endpoint for a Server at its start (the CLI passes admin/admin.h's).
using AdminFactory = std::function<std::unique_ptr<AdminEndpoint>(Server&)>;

}  // namespace kprism
