// A bound, listening TCP socket that hands each accepted client to a new Connection.
#pragma once

#include <sys/socket.h>
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
    // Listens on an already listening socket (passed by systemd; see inspect_listen_fd). Takes
    // ownership of `fd` whatever it returns: 0 or a libuv error code.
    int start_fd(uv_loop_t* loop, Server* server, int fd);
    void close();
};

// Is `fd` a listening TCP socket (IPv4 or IPv6)? Then fills `addr` with its local address;
// otherwise returns false with a message in `error`.
bool inspect_listen_fd(int fd, sockaddr_storage& addr, std::string& error);

}  // namespace kprism
