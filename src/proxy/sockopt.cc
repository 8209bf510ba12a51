// SPDX-License-Identifier: Apache-2.0
// Socket options that libuv does not wrap: setsockopt() (keepalive interval/count,
// TCP_USER_TIMEOUT) and the TCP state from TCP_INFO.
#include "kprism/proxy/sockopt.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

namespace kprism {

int apply_tcp_options(uv_tcp_t* tcp, const Settings& s, bool listener, bool with_nodelay) {
    int first_err = 0;
    auto keep = [&](int r) {
        if (r != 0 && first_err == 0) first_err = r;
    };
    uv_os_fd_t fd;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(tcp), &fd) != 0) return UV_EBADF;
    auto opt = [&](int level, int name, int value) {
        if (setsockopt(fd, level, name, &value, sizeof value) != 0) keep(-errno);
    };
    if ((s.tcp_nodelay && with_nodelay) || listener) opt(IPPROTO_TCP, TCP_NODELAY, s.tcp_nodelay ? 1 : 0);
    if (listener && s.tcp_keepalive.count() == 0) opt(SOL_SOCKET, SO_KEEPALIVE, 0);
    if (s.tcp_keepalive.count() > 0) {
        int idle = static_cast<int>(std::max<int64_t>(1, s.tcp_keepalive.count() / 1000));
        opt(SOL_SOCKET, SO_KEEPALIVE, 1);
        opt(IPPROTO_TCP, TCP_KEEPIDLE, idle);
        opt(IPPROTO_TCP, TCP_KEEPINTVL, static_cast<int>(std::max<int64_t>(1, s.tcp_keepalive_interval.count() / 1000)));
        opt(IPPROTO_TCP, TCP_KEEPCNT, static_cast<int>(s.tcp_keepalive_count));
    }
    if (s.tcp_user_timeout.count() > 0 || listener)
        opt(IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(s.tcp_user_timeout.count()));
    return first_err;
}

bool set_tcp_nodelay(uv_tcp_t* tcp, const Settings& s) {
    return s.tcp_nodelay && uv_tcp_nodelay(tcp, 1) == 0;
}

bool tcp_closed(uv_tcp_t* tcp) {
    uv_os_fd_t fd;
    tcp_info info{};
    socklen_t len = sizeof info;
    return uv_fileno(reinterpret_cast<uv_handle_t*>(tcp), &fd) == 0 &&
           getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

}  // namespace kprism
