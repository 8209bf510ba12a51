// Listening sockets: bind, listen, and accept errors that must neither spin nor crash.
#include "kprism/listener.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kprism/address.h"
#include "kprism/connection.h"
#include "kprism/log.h"
#include "kprism/server.h"

namespace kprism {

namespace {
void on_connection(uv_stream_t* s, int status) {
    auto* l = static_cast<Listener*>(s->data);
    if (status != 0) {
        // On EMFILE/ENFILE libuv has already accepted and dropped the backlog using its reserve
        // fd, so returning here does not spin; existing connections carry on.
        l->srv->note_accept_error(status);
        return;
    }
    Connection::accept(*l->srv, s);
}
}  // namespace

int Listener::start(uv_loop_t* loop, Server* server, const sockaddr* addr) {
    srv = server;
    name = sockaddr_str(addr);
    int r = uv_tcp_init_ex(loop, &tcp, addr->sa_family);
    if (r != 0) return r;
    open = true;
    tcp.data = this;
    r = uv_tcp_bind(&tcp, addr, addr->sa_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
    if (r == 0) r = uv_listen(reinterpret_cast<uv_stream_t*>(&tcp), 4096, on_connection);
    return r;
}

int Listener::start_fd(uv_loop_t* loop, Server* server, int fd) {
    srv = server;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    name = getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 ? sockaddr_str(reinterpret_cast<sockaddr*>(&ss))
                                                                        : fmt::format("fd {}", fd);
    int r = uv_tcp_init(loop, &tcp);
    if (r != 0) {
        ::close(fd);
        return r;
    }
    open = true;
    tcp.data = this;
    if (r = uv_tcp_open(&tcp, fd); r != 0) {
        ::close(fd);  // not the handle's yet; close() closes only the handle
        return r;
    }
    // listen(2) again on a listening socket only sets the backlog.
    return uv_listen(reinterpret_cast<uv_stream_t*>(&tcp), 4096, on_connection);
}

bool inspect_listen_fd(int fd, sockaddr_storage& addr, std::string& error) {
    auto opt = [fd](int level, int name) {
        int v = -1;
        socklen_t len = sizeof v;
        return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
    };
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        error = fmt::format("fd {} is not a socket: {}", fd, std::strerror(errno));
        return false;
    }
    if ((addr.ss_family != AF_INET && addr.ss_family != AF_INET6) || opt(SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
        opt(SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP) {
        error = fmt::format("fd {} is not a TCP socket (ListenStream= needs an IP address and port)", fd);
        return false;
    }
    if (opt(SOL_SOCKET, SO_ACCEPTCONN) != 1) {
        error = fmt::format("fd {} ({}) is not listening (Accept=yes is not supported)", fd,
                            sockaddr_str(reinterpret_cast<sockaddr*>(&addr)));
        return false;
    }
    return true;
}

void Listener::close() {
    if (!open) return;
    open = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp), nullptr);
}

}  // namespace kprism
