// SPDX-License-Identifier: Apache-2.0
// Admin HTTP connections: accept (at most Admin::kMaxConnections, the newest displacing an idle
// one, after what it brought is answered), read one bounded request head within a deadline,
// answer from memory with uv_write, then close; and the routes.
#include "kprism/admin/admin.h"
#include "kprism/daemon/listener.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "kprism/base/address.h"
#include "kprism/base/log.h"
#include "kprism/admin/metrics.h"
#include "kprism/daemon/server.h"
#include "kprism/admin/status.h"

namespace kprism {

// Owns its two handles (socket, deadline timer); created by accept(), it deletes itself in the
// close callback of the last one, after unlinking from the Admin. Nothing else frees it.
class AdminConnection {
public:
    static void accept(Admin& admin, uv_stream_t* listener);
    void close(const char* reason);  // idempotent
    // The table is full: closes the connection that holds its place for the least (see .cc).
    static void make_room(Admin& admin, AdminConnection* keep);

    AdminConnection* prev = nullptr;
    AdminConnection* next = nullptr;

private:
    explicit AdminConnection(Admin& admin) : admin_(admin) {}

    void read_arrived();
    void on_bytes(const char* p, size_t n);
    void answer(const AdminResponse& r, bool head_only);
    uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&tcp_); }
    int eviction_rank();

    static void on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf);
    static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*);
    static void on_write(uv_write_t* req, int status);
    static void on_shutdown(uv_shutdown_t* req, int status);
    static void on_timer(uv_timer_t* t);
    static void on_closed(uv_handle_t* h);

    static constexpr size_t kMaxDiscard = 64 * 1024;  // read and dropped after the answer

    Admin& admin_;
    uv_tcp_t tcp_{};
    uv_timer_t timer_{};
    uv_write_t wreq_{};
    uv_shutdown_t sreq_{};
    int open_handles_ = 0;
    bool closing_ = false;
    bool answered_ = false;  // the response is written or being written; later bytes are dropped
    bool shut_ = false;      // our FIN is sent
    bool peer_eof_ = false;  // the client's FIN arrived after its request
    uint64_t started_ms_ = 0;
    size_t discarded_ = 0;
    HttpRequestParser parser_;
    std::string out_;  // the response, alive until its write completes
    char rbuf_[2048];
};

namespace {

const char* reason_phrase(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

std::string http_date() {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    return buf;
}

AdminResponse text(int status, std::string body) {
    AdminResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
}

}  // namespace

std::string serialize(const AdminResponse& r, bool head_only) {
    std::string out = fmt::format(
        "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}"
        "Connection: close\r\n\r\n",
        r.status, reason_phrase(r.status), http_date(), r.content_type, r.body.size(),
        r.allow ? fmt::format("Allow: {}\r\n", HttpRequestParser::kAllow) : "");
    if (!head_only) out += r.body;
    return out;
}

AdminResponse Admin::route(const HttpRequest& req) {
    if (req.path == "/healthz") {
        // Judged now on the monotonic clock, not the loop's cached time (see heartbeat.h).
        std::string why;
        bool ok = srv_.heartbeat().healthy(&why);
        return text(ok ? 200 : 503, ok ? "ok\n" : why + "\n");
    }
    StateView s = take_state_view(srv_);
    if (req.path == "/readyz") return text(state_ready(s) ? 200 : 503, render_readyz(s, req.has_param("verbose")));
    if (req.path == "/metrics") {
        AdminResponse r = text(200, render_metrics(s));
        r.content_type = kMetricsContentType;
        return r;
    }
    if (req.path == "/status") {
        AdminResponse r = text(200, render_status_json(s));
        r.content_type = "application/json";
        return r;
    }
    return text(404, "not found (try /healthz, /readyz, /readyz?verbose, /metrics, /status)\n");
}

int Admin::start(uv_loop_t* loop, const sockaddr* addr) {
    name_ = sockaddr_str(addr);
    return listen_on(loop, tcp_, open_, this, addr, 128, on_connection);
}

int Admin::start_fd(uv_loop_t* loop, int fd) { return listen_on_fd(loop, tcp_, open_, this, fd, 128, on_connection, name_); }

void Admin::close() {
    if (open_) {
        open_ = false;
        uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), nullptr);
    }
    conns_.for_each([](AdminConnection* c) { c->close("admin endpoint closed"); });
}

void Admin::on_connection(uv_stream_t* s, int status) {
    auto* self = static_cast<Admin*>(s->data);
    if (status != 0) {
        // EMFILE and the like: libuv has dropped the pending connection with its reserve fd.
        KPRISM_DEBUG("admin accept failed", {{"error", uv_strerror(status)}});
        return;
    }
    AdminConnection::accept(*self, s);
}

void AdminConnection::accept(Admin& admin, uv_stream_t* listener) {
    auto* c = new AdminConnection(admin);
    uv_loop_t* loop = listener->loop;
    c->started_ms_ = uv_now(loop);
    uv_tcp_init(loop, &c->tcp_);
    c->tcp_.data = c;
    uv_timer_init(loop, &c->timer_);
    c->timer_.data = c;
    c->open_handles_ = 2;
    admin.conns_.push_front(c);
    admin.live_++;
    if (uv_accept(listener, c->stream()) != 0) {
        c->close("accept failed");
        return;
    }
    c->read_arrived();
    if (c->closing_) return;
    if (admin.live_ > Admin::kMaxConnections) make_room(admin, c);
    uv_timer_start(&c->timer_, on_timer, Admin::kRequestTimeoutMs, 0);
    uv_read_start(c->stream(), on_alloc, on_read);
}

// What arrived with the connection is read now, and a complete request answered, before any
// other connection is closed to make room: in a burst of new connections (libuv accepts them all
// before it reads any), a probe among them is answered, not taken for an idle one. A flood of
// connections pays for its answers in the accept loop: the kernel's accept queue fills and the
// flood's connects wait, not the data path (measured: six local flooders of GET /metrics raised
// a spliced round trip's 99th percentile to 0.2-0.7 ms; read later, as before, to 3-8 ms).
void AdminConnection::read_arrived() {
    uv_os_fd_t fd;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) != 0) return;
    ssize_t n = ::recv(fd, rbuf_, sizeof rbuf_, MSG_DONTWAIT);
    if (n > 0) on_bytes(rbuf_, static_cast<size_t>(n));
    else if (n == 0) close("client closed before a complete request");
    else if (errno != EAGAIN && errno != EWOULDBLOCK) close("read error");
}

// Lower goes first. 0: no complete request head and nothing waiting to be read, kIdleAfterMs
// after accept (idle, or a head that trickles in): it holds its place for nothing. 1: answered
// (the answer is written or being written to a client that may not read it). 2: nothing yet from
// a connection accepted this moment: its request may be on its way. 3: no complete head yet, but
// bytes are waiting in the socket: likely a prober accepted in the same burst as others, whose
// head is read next.
int AdminConnection::eviction_rank() {
    if (answered_) return 1;
    uv_os_fd_t fd;
    int waiting = 0;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&tcp_), &fd) == 0 && ioctl(fd, FIONREAD, &waiting) == 0 &&
        waiting > 0)
        return 3;
    return uv_now(tcp_.loop) - started_ms_ < Admin::kIdleAfterMs ? 2 : 0;
}

// Closing the newcomer instead would let any local process that holds the table (idle
// connections cost it nothing) silence /healthz, and the liveness probe would restart kprism. So
// the newest connection always gets in, and the oldest of the lowest rank makes room: at most one
// ioctl per connection in the table, only while it is full.
void AdminConnection::make_room(Admin& admin, AdminConnection* keep) {
    AdminConnection* victim = nullptr;
    int best = 4;
    admin.conns_.for_each([&](AdminConnection* c) {  // newest first: `<=` keeps the oldest of a rank
        if (c == keep || c->closing_) return;
        if (int r = c->eviction_rank(); r <= best) {
            best = r;
            victim = c;
        }
    });
    if (victim) victim->close(best == 0 ? "evicted: table full, no request yet" : "evicted: table full");
}

void AdminConnection::on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
    auto* c = static_cast<AdminConnection*>(h->data);
    *buf = uv_buf_init(c->rbuf_, sizeof c->rbuf_);
}

void AdminConnection::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) {
    auto* c = static_cast<AdminConnection*>(s->data);
    if (c->closing_ || n == 0) return;
    if (n > 0) {
        if (!c->answered_) {
            c->on_bytes(c->rbuf_, static_cast<size_t>(n));
        } else if ((c->discarded_ += static_cast<size_t>(n)) > kMaxDiscard) {
            c->close("client kept sending after the answer");
        }
        return;
    }
    if (n != UV_EOF || !c->answered_) {
        c->close(n == UV_EOF ? "client closed before a complete request" : "read error");
        return;
    }
    // The client is done; close once our answer and FIN are out (closing cancels a pending write).
    c->peer_eof_ = true;
    uv_read_stop(s);
    if (c->shut_) c->close("done");
}

void AdminConnection::on_bytes(const char* p, size_t n) {
    HttpRequestParser::State st = parser_.feed(p, n);
    if (st == HttpRequestParser::State::need_more) return;
    const HttpRequest& req = parser_.request();
    AdminResponse r;
    if (st == HttpRequestParser::State::error) {
        r = text(parser_.error_status(), parser_.error() + "\n");
        r.allow = parser_.error_status() == 405;
    } else {
        r = admin_.route(req);
    }
    KPRISM_DEBUG("admin request", {{"method", req.method.empty() ? std::string("-") : req.method},
                                   {"target", req.target.empty() ? std::string("-") : req.target},
                                   {"status", r.status}});
    answer(r, st == HttpRequestParser::State::done && req.method == "HEAD");
}

// Written with uv_write from memory; then our FIN, and what the client still sends is read and
// dropped for a moment so that closing does not reset a connection with unread bytes (which could
// destroy the answer before the client has read it).
void AdminConnection::answer(const AdminResponse& r, bool head_only) {
    answered_ = true;
    out_ = serialize(r, head_only);
    wreq_.data = this;
    uv_buf_t b = uv_buf_init(out_.data(), static_cast<unsigned>(out_.size()));
    if (uv_write(&wreq_, stream(), &b, 1, on_write) != 0) close("write failed");
}

void AdminConnection::on_write(uv_write_t* req, int status) {
    auto* c = static_cast<AdminConnection*>(req->data);
    if (c->closing_) return;
    if (status != 0) {
        c->close("write error");
        return;
    }
    c->sreq_.data = c;
    if (uv_shutdown(&c->sreq_, c->stream(), on_shutdown) != 0) c->close("shutdown failed");
}

void AdminConnection::on_shutdown(uv_shutdown_t* req, int status) {
    auto* c = static_cast<AdminConnection*>(req->data);
    if (c->closing_) return;
    if (status != 0 || c->peer_eof_) {
        c->close(status != 0 ? "shutdown failed" : "done");
        return;
    }
    c->shut_ = true;
    uv_timer_start(&c->timer_, on_timer, Admin::kLingerMs, 0);
}

void AdminConnection::on_timer(uv_timer_t* t) {
    auto* c = static_cast<AdminConnection*>(t->data);
    c->close(c->shut_ ? "done" : "request timeout");
}

void AdminConnection::close(const char* reason) {
    if (closing_) return;
    closing_ = true;
    admin_.live_--;
    KPRISM_DEBUG("admin connection closed",
                 {{"reason", reason}, {"duration_ms", static_cast<uint64_t>(uv_now(tcp_.loop) - started_ms_)}});
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_closed);
}

void AdminConnection::on_closed(uv_handle_t* h) {
    auto* c = static_cast<AdminConnection*>(h->data);
    if (--c->open_handles_ > 0) return;
    c->admin_.conns_.remove(c);
    delete c;
}

}  // namespace kprism
