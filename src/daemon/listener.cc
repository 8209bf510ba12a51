// SPDX-License-Identifier: Apache-2.0
// Listening sockets: bind, listen, and accept errors that must neither spin nor crash.
#include "kprism/daemon/listener.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kprism/base/address.h"
#include "kprism/proxy/connection.h"
#include "kprism/base/log.h"
#include "kprism/daemon/server.h"

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
    // The accepted socket is the connection's own (it is not a libuv stream: splice_poll.h).
    // libuv keeps it in accepted_fd for uv_accept(); taking it from there leaves -1, which lets
    // libuv accept the next one at once. Connection::accept owns it from here, whatever happens.
    static_assert(UV_VERSION_MAJOR == 1, "uv_stream_t::accepted_fd is libuv 1's");
    int fd = std::exchange(s->accepted_fd, -1);
    if (l->srv->hold_new_client(fd)) return;  // after a restart, until the upstreams are judged
    Connection::accept(*l->srv, fd);
}
}  // namespace

int listen_on(uv_loop_t* loop, uv_tcp_t& tcp, bool& open, void* data, const sockaddr* addr, int backlog,
              uv_connection_cb cb) {
    int r = uv_tcp_init_ex(loop, &tcp, addr->sa_family);
    if (r != 0) return r;
    open = true;
    tcp.data = data;
    r = uv_tcp_bind(&tcp, addr, addr->sa_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
    if (r == 0) r = uv_listen(reinterpret_cast<uv_stream_t*>(&tcp), backlog, cb);
    return r;
}

int listen_on_fd(uv_loop_t* loop, uv_tcp_t& tcp, bool& open, void* data, int fd, int backlog, uv_connection_cb cb,
                 std::string& name) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    name = getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 ? sockaddr_str(ss)
                                                                        : fmt::format("fd {}", fd);
    int r = uv_tcp_init(loop, &tcp);
    if (r != 0) {
        ::close(fd);
        return r;
    }
    open = true;
    tcp.data = data;
    if (r = uv_tcp_open(&tcp, fd); r != 0) {
        ::close(fd);  // not the handle's yet; closing the handle does not close it
        return r;
    }
    // listen(2) again on a listening socket only sets the backlog.
    return uv_listen(reinterpret_cast<uv_stream_t*>(&tcp), backlog, cb);
}

int Listener::start(uv_loop_t* loop, Server* server, const sockaddr* addr) {
    srv = server;
    name = sockaddr_str(addr);
    return listen_on(loop, tcp, open, this, addr, 4096, on_connection);
}

int Listener::start_fd(uv_loop_t* loop, Server* server, int fd) {
    srv = server;
    return listen_on_fd(loop, tcp, open, this, fd, 4096, on_connection, name);
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
                            sockaddr_str(addr));
        return false;
    }
    return true;
}

void Listener::close() {
    if (!open) return;
    open = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp), nullptr);
}

bool bound_listener(const uv_tcp_t& tcp, OwnListener& out) {
    sockaddr_storage ss{};
    int len = sizeof ss;
    if (uv_tcp_getsockname(&tcp, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
    out.addr = ss;
    out.v6_only = false;
    uv_os_fd_t fd;
    if (ss.ss_family == AF_INET6 && uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp), &fd) == 0) {
        int on = 0;
        socklen_t n = sizeof on;
        out.v6_only = getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, &n) == 0 && on != 0;
    }
    return true;
}

}  // namespace kprism
