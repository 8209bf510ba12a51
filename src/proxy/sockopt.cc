// SPDX-License-Identifier: Apache-2.0
// Socket options of the spliced sockets and the listeners (keepalive and its timings,
// TCP_NODELAY, TCP_USER_TIMEOUT, TCP_QUICKACK before a connect), and the TCP state from TCP_INFO.
#include "kprism/proxy/sockopt.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

namespace kprism {

int apply_tcp_options(int fd, const Settings& s, bool listener, bool with_nodelay) {
    int first_err = 0;
    auto keep = [&](int r) {
        if (r != 0 && first_err == 0) first_err = r;
    };
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

bool set_tcp_nodelay(int fd, const Settings& s) {
    int one = 1;
    return s.tcp_nodelay && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
}

bool hold_handshake_ack(int fd) {
    int zero = 0;
    return setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof zero) == 0;
}

bool tcp_closed(int fd) {
    tcp_info info{};
    socklen_t len = sizeof info;
    return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

}  // namespace kprism
