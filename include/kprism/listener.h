// A bound, listening TCP socket that hands each accepted client to a new Connection.
#pragma once

#include <uv.h>

#include <string>

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
    void close();
};

}  // namespace kprism
