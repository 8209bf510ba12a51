// Listening sockets: bind, listen, and accept errors that must neither spin nor crash.
#include "kprism/listener.h"

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

void Listener::close() {
    if (!open) return;
    open = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp), nullptr);
}

}  // namespace kprism
