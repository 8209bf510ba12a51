// SPDX-License-Identifier: Apache-2.0
// The splice: accept, connect upstream with timeout and retries, replay a silent upstream's first
// flight elsewhere, then copy bytes both ways with backpressure (one pooled chunk per direction at
// most, none while idle), half-close, RST propagation, and closes when the upstream goes down.
#include "kprism/proxy/connection.h"

#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "kprism/base/log.h"
#include "kprism/daemon/server.h"
#include "kprism/proxy/sockopt.h"

namespace kprism {

namespace {
Connection* owner(uv_handle_t* h) { return static_cast<Connection*>(h->data); }
uv_stream_t* stream(uv_tcp_t& t) { return reinterpret_cast<uv_stream_t*>(&t); }
uv_handle_t* handle(uv_tcp_t& t) { return reinterpret_cast<uv_handle_t*>(&t); }

// libuv reports UV_EOF without reading on when POLLHUP comes with bytes it has just read (the
// short-circuit in uv__stream_io), so a peer's RST that arrives together with its last bytes looks
// like a FIN, and would be passed on as one. The socket's pending error tells them apart. Only that
// EOF needs the getsockopt: it comes with a null buffer, while an EOF that read(2) returned (0: the
// peer's FIN, read in order) comes with the buffer on_alloc gave it.
bool reset_pending(uv_tcp_t& t) {
    uv_os_fd_t fd;
    int err = 0;
    socklen_t len = sizeof err;
    return uv_fileno(reinterpret_cast<uv_handle_t*>(&t), &fd) == 0 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNRESET;
}

// Errors that are ours (fd or memory exhaustion), not the upstream's: they must not mark it down.
bool local_error(int status) {
    return status == UV_EMFILE || status == UV_ENFILE || status == UV_ENOBUFS || status == UV_ENOMEM ||
           status == UV_EADDRNOTAVAIL;
}
}  // namespace

Connection::Connection(Server& srv) : srv_(srv) {}

Connection::~Connection() {
    release(client_);
    release(upstream_);
}

void Connection::accept(Server& srv, uv_stream_t* listener) {
    auto* c = new Connection(srv);
    c->started_ms_ = uv_now(srv.loop());
    uv_tcp_init(srv.loop(), &c->client_.tcp);
    c->client_.tcp.data = c;
    c->client_.open = true;
    c->open_handles_++;
    uv_timer_init(srv.loop(), &c->timer_);
    c->timer_.data = c;
    c->timer_open_ = true;
    c->open_handles_++;
    srv.connection_opened(c);
    if (int r = uv_accept(listener, stream(c->client_.tcp)); r != 0) {
        KPRISM_DEBUG("accept failed", {{"error", uv_strerror(r)}});
        c->close("accept failed");
        return;
    }
    if (srv.over_connection_limit()) {
        srv.note_rejected();
        c->close("max_connections reached", true);
        return;
    }
    // The client socket inherited the TCP options from its listener (sockopt.h).
    c->start_attempt();
}

Upstream* Connection::pick(uint64_t now) {
    ControlPlane& cp = srv_.control();
    return pick_upstream(cp.upstreams(), srv_.selection(), tried_, now, cp.fallback_allowed());
}

void Connection::start_attempt() {
    uint64_t now = uv_now(srv_.loop());
    up_ = pick(now);
    if (!up_) {
        srv_.note_client_failed(attempts_);
        close("no upstream reachable", true);
        return;
    }
    ++attempts_;
    attempt_offset_ms_ = static_cast<uint32_t>(now - started_ms_);
    tried_ |= TriedSet{1} << up_->index;
    up_->active++;  // counted from the pick, so a burst of accepts spreads under least-connections
    int r = uv_tcp_init_ex(srv_.loop(), &upstream_.tcp, up_->sa.ss_family);
    if (r != 0) {
        log::warn("cannot create upstream socket", {{"upstream", up_->name}, {"error", uv_strerror(r)}});
        up_->active--;
        up_ = nullptr;
        close("cannot create upstream socket", true);
        return;
    }
    upstream_.tcp.data = this;
    upstream_.open = true;
    open_handles_++;
    // The options wait for the Server's sweep (sockopt.h): a short connection costs no setsockopt.
    // Not a user timeout under a second, which could act before the sweep (0, none, does not).
    const auto user_timeout = srv_.config().s.tcp_user_timeout;
    if (options_swept_ || (user_timeout.count() > 0 && user_timeout < std::chrono::seconds(1))) {
        apply_tcp_options(&upstream_.tcp, srv_.config().s);
        upstream_.nodelay = true;
    } else if (!options_deferred_) {
        options_deferred_ = true;
        options_gen_ = static_cast<uint8_t>(srv_.upstream_options_deferred());
    }
    creq_ = srv_.pools().connects.get();
    if (!creq_) {
        attempt_failed(ConnectFailure::other, "out of memory", false);
        return;
    }
    creq_->data = this;
    r = uv_tcp_connect(creq_, &upstream_.tcp, as_sockaddr(up_->sa), on_connect);
    if (r != 0) {
        srv_.pools().connects.put(creq_);
        creq_ = nullptr;
        attempt_failed(connect_failure_from_uv(r), uv_strerror(r), !local_error(r));
        return;
    }
    // Reading is armed together with the connect (libuv delivers nothing before on_connect), so
    // the socket is registered with epoll once, not re-registered when the connect completes.
    uv_read_start(stream(upstream_.tcp), on_alloc, on_read_cb);
    timer_for_ = TimerFor::connect;
    uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(srv_.config().s.connect_timeout.count()), 0);
}

void Connection::on_connect(uv_connect_t* req, int status) {
    auto* c = static_cast<Connection*>(req->data);
    c->srv_.pools().connects.put(req);
    c->creq_ = nullptr;
    if (status == UV_ECANCELED) return;  // our own uv_close of the attempt; handled there
    uv_timer_stop(&c->timer_);
    c->timer_for_ = TimerFor::none;
    if (c->closing_) return;
    if (status != 0) {
        c->attempt_failed(connect_failure_from_uv(status), uv_strerror(status), !local_error(status));
        return;
    }
    c->start_splicing();
}

void Connection::on_timer(uv_timer_t* t) {
    auto* c = static_cast<Connection*>(t->data);
    TimerFor why = c->timer_for_;
    c->timer_for_ = TimerFor::none;
    if (c->closing_) return;
    switch (why) {
    case TimerFor::connect:
        if (c->state_ == State::connecting) c->attempt_failed(ConnectFailure::timeout, "connect timeout", true);
        break;
    case TimerFor::first_response:
        if (c->awaiting_answer_ && !c->try_replay(ConnectFailure::no_response, "no response")) {
            KPRISM_DEBUG("no other upstream to move to; waiting", {{"upstream", c->up_->name}});
        }
        break;
    case TimerFor::down:
        // Re-checked now: the upstream may be back, or a hold begun (then the rule schedules it
        // again when the hold ends).
        if (c->up_ && c->srv_.control().may_close_for_down(*c->up_)) {
            c->srv_.control().note_closed_for_down();
            c->close("upstream down");
        }
        break;
    case TimerFor::removed:
        c->close("endpoint removed by reload: drain timeout");
        break;
    case TimerFor::rebalance:
        // Re-checked now: moved only while its upstream is up (a down one is close_on_down's).
        if (c->up_ && c->up_->health == Health::up && !c->up_->removed) {
            c->srv_.note_rebalanced();
            c->close("rebalance: upstream over its share");
        }
        break;
    case TimerFor::none: break;
    }
}

// Gives up on the current upstream, records the failure, and retries elsewhere once the
// attempt's handle is closed (libuv handles cannot be re-initialised before then).
void Connection::attempt_failed(ConnectFailure why, const char* reason, bool upstream_fault) {
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    Upstream* u = up_;
    u->active--;
    if (upstream_fault) srv_.control().passive_failure(*u, why, reason, started_ms_ + attempt_offset_ms_);
    KPRISM_DEBUG("upstream connect failed", {{"upstream", u->name}, {"reason", reason}, {"attempt", attempts_}});
    up_ = nullptr;
    upstream_.open = false;
    if (!upstream_fault) {
        uv_close(handle(upstream_.tcp), on_closed);
        close(reason, true);
        return;
    }
    uv_close(handle(upstream_.tcp), on_upstream_closed_for_retry);
}

void Connection::on_upstream_closed_for_retry(uv_handle_t* h) {
    Connection* c = owner(h);
    c->open_handles_--;
    if (c->closing_) {
        c->handle_closed();
        return;
    }
    c->upstream_ = Side{};
    c->start_attempt();
}

// Moves a connection whose upstream has not answered yet to another upstream, replaying the
// client's first flight there. False (nothing changed) when no other upstream is left to try.
bool Connection::try_replay(ConnectFailure why, const char* reason) {
    uint64_t now = uv_now(srv_.loop());
    if (!pick(now)) return false;
    Upstream* u = up_;
    KPRISM_DEBUG("moving connection", {{"from", u->name}, {"reason", reason}, {"replay_bytes", first_flight_.size()}});
    srv_.note_replayed();
    srv_.control().passive_failure(*u, why, reason, started_ms_ + attempt_offset_ms_);
    u->active--;
    up_ = nullptr;
    state_ = State::connecting;
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    uv_read_stop(stream(upstream_.tcp));
    uv_read_stop(stream(client_.tcp));  // resumed once the first flight is written to the next upstream
    release(upstream_);
    upstream_.open = false;
    uv_close(handle(upstream_.tcp), on_upstream_closed_for_retry);
    return true;
}

void Connection::start_splicing() {
    state_ = State::splicing;
    srv_.handoff().crash_copy_changed();
    srv_.control().upstreams().connect_succeeded(*up_);
    up_->total++;
    KPRISM_DEBUG("connection established", {{"upstream", up_->name}, {"attempts", attempts_}});
    if (awaiting_answer_ && !first_flight_.empty()) {
        // A replay: the client's first flight goes to the new upstream; reading the client resumes
        // when that write completes (on_write), so later bytes keep their order.
        if (!queue_write(upstream_, uv_buf_init(first_flight_.data(), static_cast<unsigned>(first_flight_.size()))))
            return;
        timer_for_ = TimerFor::first_response;
        uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(srv_.config().s.first_response_timeout.count()), 0);
        return;
    }
    awaiting_answer_ = srv_.config().s.first_response_timeout.count() > 0;
    uv_read_start(stream(client_.tcp), on_alloc, on_read_cb);
    if (up_->removed) close_later_for_removal(static_cast<uint64_t>(srv_.config().s.drain_timeout.count()));
}

// Until the upstream answers, a copy of what the client sent (at most kMaxFirstFlight bytes) is
// kept for a replay; the first bytes start the first-response timer. More than that, and the
// connection is simply bound to its upstream.
void Connection::keep_first_flight(const char* p, size_t n) {
    if (first_flight_.size() + n > kMaxFirstFlight) {
        stop_awaiting_answer();
        std::string().swap(first_flight_);
        if (timer_for_ == TimerFor::first_response) {
            uv_timer_stop(&timer_);
            timer_for_ = TimerFor::none;
        }
        return;
    }
    bool first = first_flight_.empty();
    first_flight_.append(p, n);
    if (first) {
        timer_for_ = TimerFor::first_response;
        uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(srv_.config().s.first_response_timeout.count()), 0);
    }
}

// No replay any more: the connection is bound to its upstream, and may go into the crash copy.
void Connection::stop_awaiting_answer() {
    if (!awaiting_answer_) return;
    awaiting_answer_ = false;
    srv_.handoff().crash_copy_changed();
}

// The upstream sent its first byte: from now on the connection is bound to it.
void Connection::answered() {
    stop_awaiting_answer();
    if (timer_for_ == TimerFor::first_response) {
        uv_timer_stop(&timer_);
        timer_for_ = TimerFor::none;
    }
    std::string().swap(first_flight_);
    if (up_->removed) close_later_for_removal(static_cast<uint64_t>(srv_.config().s.drain_timeout.count()));
}

void Connection::close_later_for_removal(uint64_t drain_ms) {
    // Connecting, or awaiting a first answer: the timer is busy; start_splicing()/answered()
    // schedule the drain once it is free.
    if (closing_ || state_ != State::splicing || (awaiting_answer_ && !first_flight_.empty())) return;
    timer_for_ = TimerFor::removed;
    uv_timer_start(&timer_, on_timer, drain_ms, 0);
}

void Connection::close_later_for_rebalance(uint64_t delay_ms) {
    if (!movable()) return;
    timer_for_ = TimerFor::rebalance;
    uv_timer_start(&timer_, on_timer, delay_ms, 0);
}

bool Connection::close_later_for_down(uint64_t delay_ms) {
    // A connection whose first flight awaits an answer is moved by its first-response timer instead.
    if (closing_ || state_ != State::splicing || (awaiting_answer_ && !first_flight_.empty())) return false;
    timer_for_ = TimerFor::down;
    uv_timer_start(&timer_, on_timer, delay_ms, 0);
    return true;
}

void Connection::apply_deferred_options() {
    if (!options_deferred_) return;
    options_deferred_ = false;
    options_swept_ = true;
    srv_.upstream_options_done(options_gen_);
    if (!upstream_.open || closing_) return;  // a retry's next socket gets them in start_attempt
    apply_tcp_options(&upstream_.tcp, srv_.config().s, false, !upstream_.nodelay);
    upstream_.nodelay = true;
}

// Nagle's algorithm holds back a small segment only while an earlier small one is unacknowledged,
// so an upstream socket's first write never waits for TCP_NODELAY; it is set before the second,
// when the options sweep has not set it yet.
void Connection::before_write(Side& to) {
    if (&to != &upstream_ || to.nodelay) return;
    if (!to.wrote) {
        to.wrote = true;
        return;
    }
    to.nodelay = true;
    set_tcp_nodelay(&to.tcp, srv_.config().s);
}

void Connection::on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
    Connection* c = owner(h);
    Side& s = c->side_of(h);
    if (!s.buf) s.buf = c->srv_.pools().buffers.get();
    *buf = s.buf ? uv_buf_init(s.buf, BufferPool::kChunkSize) : uv_buf_init(nullptr, 0);
}

void Connection::release(Side& s) {
    if (s.buf) {
        srv_.pools().buffers.put(s.buf);
        s.buf = nullptr;
    }
    s.len = 0;
}

void Connection::on_read_cb(uv_stream_t* st, ssize_t nread, const uv_buf_t* buf) {
    Connection* c = owner(reinterpret_cast<uv_handle_t*>(st));
    Side& from = c->side_of(reinterpret_cast<uv_handle_t*>(st));
    c->on_read(from, c->other(from), nread, nread == UV_EOF && buf && buf->base);
}

void Connection::on_read(Side& from, Side& to, ssize_t nread, bool fin_read) {
    if (closing_) return;
    const bool client_side = &from == &client_;
    if (nread > 0) {
        from.len = static_cast<uint32_t>(nread);
        if (client_side) {
            up_->bytes_to_upstream += from.len;
            if (awaiting_answer_) keep_first_flight(from.buf, from.len);
        } else {
            up_->bytes_from_upstream += from.len;
            if (awaiting_answer_) answered();
        }
        forward(from, to);
        return;
    }
    if (nread == 0) {  // EAGAIN: nothing read, give the chunk back
        release(from);
        return;
    }
    release(from);
    if (nread == UV_EOF && !fin_read && reset_pending(from.tcp)) nread = UV_ECONNRESET;
    // An upstream that closes or resets before answering anything is treated like a silent one.
    if (!client_side && awaiting_answer_ && !first_flight_.empty() &&
        try_replay(ConnectFailure::hung_up, nread == UV_EOF ? "closed before answering" : "reset before answering"))
        return;
    // The apiserver ended it first (not the client): a passive signal when many do at once. Its
    // age on this upstream: a connection moved here after a failed attempt elsewhere is young.
    if (!client_side && !to.eof && nread != UV_ENOBUFS)
        srv_.control().upstream_ended(*up_, uv_now(srv_.loop()) - (started_ms_ + attempt_offset_ms_));
    if (nread == UV_EOF) {
        from.eof = true;
        if (client_side) stop_awaiting_answer();  // a half-closed client is never replayed
        uv_read_stop(stream(from.tcp));
        srv_.watch_half_closed();  // from now on only the sweep sees a reset of `from`
        // The last FIN: `to` finished first and nothing is queued either way, so both sockets are
        // read to EOF and close(2) sends each its FIN (also the one a pending shutdown of `from`
        // still owed); shutdown(2) first would only cost syscalls.
        if (to.eof && !to.wreq && !from.wreq) {
            close("done");
            return;
        }
        // libuv runs the shutdown after any write still queued on `to`.
        to.sreq = srv_.pools().shutdowns.get();
        if (!to.sreq) {
            close("out of memory", true, true);
            return;
        }
        to.sreq->data = this;
        if (uv_shutdown(to.sreq, stream(to.tcp), on_shutdown) != 0) {
            srv_.pools().shutdowns.put(to.sreq);
            to.sreq = nullptr;
            close("shutdown failed");
            return;
        }
        maybe_finish();
        return;
    }
    const char* reason = nread == UV_ENOBUFS ? "out of buffers"
                         : client_side       ? "client read error"
                                             : "upstream read error";
    // Propagate a reset to the other side so neither peer waits on a half-dead connection.
    close(reason, !client_side, client_side);
}

// Writes what `from` read into `to`: straight away when the socket takes it, else queued with
// reads from `from` paused until the write completes (backpressure).
// The first attempt is send(2) itself, not uv_try_write: libuv's write(2) goes through the VFS
// layer (file position lock, permission and fsnotify hooks) that send(2) skips, a few per cent of
// kprism's CPU per request (bench/RESULTS.md). Nothing is ever queued on `to` here (reads from
// `from` stop while a write into `to` is queued), so the bytes keep their order.
void Connection::forward(Side& from, Side& to) {
    before_write(to);
    int n = UV_EAGAIN;
    uv_os_fd_t fd;
    if (!to.wreq && uv_fileno(handle(to.tcp), &fd) == 0) {
        ssize_t r;
        do r = ::send(fd, from.buf, from.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (r < 0 && errno == EINTR);
        n = r >= 0 ? static_cast<int>(r) : (errno == EWOULDBLOCK ? UV_EAGAIN : -errno);
    }
    if (n == static_cast<int>(from.len)) {
        release(from);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        close(&to == &client_ ? "client write error" : "upstream write error", &to != &client_, &to == &client_);
        return;
    }
    uint32_t done = n > 0 ? static_cast<uint32_t>(n) : 0;
    uv_read_stop(stream(from.tcp));
    queue_write(to, uv_buf_init(from.buf + done, from.len - done));
}

// Queues `b` on `to` with a pooled request, released in on_write. False (and the connection
// closing) when the write cannot be queued.
bool Connection::queue_write(Side& to, uv_buf_t b) {
    before_write(to);
    to.wreq = srv_.pools().writes.get();
    if (!to.wreq) {
        close("out of memory", true, true);
        return false;
    }
    to.wreq->data = this;
    if (uv_write(to.wreq, stream(to.tcp), &b, 1, on_write) != 0) {
        srv_.pools().writes.put(to.wreq);
        to.wreq = nullptr;
        close("write failed", true, true);
        return false;
    }
    return true;
}

void Connection::on_write(uv_write_t* req, int status) {
    auto* c = static_cast<Connection*>(req->data);
    Side& to = req == c->client_.wreq ? c->client_ : c->upstream_;
    Side& from = c->other(to);
    to.wreq = nullptr;
    c->srv_.pools().writes.put(req);
    if (status == UV_ECANCELED || c->closing_) return;
    if (status != 0) {
        c->close(&to == &c->client_ ? "client write error" : "upstream write error", &to != &c->client_,
                 &to == &c->client_);
        return;
    }
    c->release(from);
    if (!from.eof && !c->srv_.handoff().handing_over()) uv_read_start(stream(from.tcp), on_alloc, on_read_cb);
}

void Connection::on_shutdown(uv_shutdown_t* req, int status) {
    auto* c = static_cast<Connection*>(req->data);
    Side& to = req == c->client_.sreq ? c->client_ : c->upstream_;
    to.sreq = nullptr;
    c->srv_.pools().shutdowns.put(req);
    if (status == UV_ECANCELED || c->closing_) return;
    to.shut = true;
    c->maybe_finish();
}

bool Connection::check_half_closed() {
    if (closing_ || state_ != State::splicing) return false;
    for (Side* s : {&client_, &upstream_}) {
        if (!only_peer_finished(*s) || !tcp_closed(&s->tcp)) continue;
        const bool client = s == &client_;
        close(client ? "client reset after its FIN" : "upstream reset after its FIN", !client, client);
        return false;
    }
    return only_peer_finished(client_) || only_peer_finished(upstream_);
}

// Both peers sent FIN and both FINs were passed on: the connection ended normally.
void Connection::maybe_finish() {
    if (client_.eof && upstream_.eof && client_.shut && upstream_.shut) close("done");
}

bool Connection::pause_for_handover() {
    if (closing_) return false;
    if (state_ != State::splicing) {
        close("handover: not yet connected upstream");  // the client reconnects to the next process
        return false;
    }
    uv_read_stop(stream(client_.tcp));
    uv_read_stop(stream(upstream_.tcp));
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    return true;
}

bool Connection::handover_entry(handover::Entry& e, int& client_fd, int& upstream_fd, bool flushed_only) {
    if (closing_ || state_ != State::splicing || !up_ || (flushed_only ? !quiescent() : awaiting_answer_)) return false;
    uv_os_fd_t cf, uf;
    if (uv_fileno(handle(client_.tcp), &cf) != 0 || uv_fileno(handle(upstream_.tcp), &uf) != 0) return false;
    apply_deferred_options();  // the next process takes the socket as it is
    e.client_local = handover::local_address(cf);
    e.client_peer = handover::peer_address(cf);
    e.upstream_local = handover::local_address(uf);
    e.upstream_peer = handover::peer_address(uf);
    if (e.client_local.empty() || e.client_peer.empty() || e.upstream_local.empty() || e.upstream_peer.empty())
        return false;  // a peer already gone (ENOTCONN): nothing worth handing over
    e.upstream = up_->name;
    e.client_eof = client_.eof;
    e.client_shut = client_.shut;
    e.upstream_eof = upstream_.eof;
    e.upstream_shut = upstream_.shut;
    e.age_ms = uv_now(srv_.loop()) - started_ms_;
    client_fd = cf;
    upstream_fd = uf;
    return true;
}

bool Connection::resume(Server& srv, int client_fd, int upstream_fd, Upstream& up, const handover::Entry& e) {
    auto* c = new Connection(srv);
    uint64_t now = uv_now(srv.loop());
    c->started_ms_ = now > e.age_ms ? now - e.age_ms : 0;
    c->state_ = State::splicing;
    uv_timer_init(srv.loop(), &c->timer_);
    c->timer_.data = c;
    c->timer_open_ = true;
    c->open_handles_++;
    srv.connection_opened(c, true);
    int r = 0;
    for (auto [s, fd] : {std::pair{&c->client_, client_fd}, std::pair{&c->upstream_, upstream_fd}}) {
        if (r == 0) r = uv_tcp_init(srv.loop(), &s->tcp);
        if (r == 0) {
            s->tcp.data = c;
            s->open = true;
            c->open_handles_++;
            r = uv_tcp_open(&s->tcp, fd);
            if (r == 0) continue;
        }
        ::close(fd);
    }
    if (r != 0) {
        log::warn("cannot resume a handed-over connection", {{"upstream", up.name}, {"error", uv_strerror(r)}});
        c->close("handover: cannot resume");
        return false;
    }
    c->up_ = &up;
    c->options_swept_ = true;  // the previous process set the upstream socket's options
    c->upstream_.nodelay = true;
    up.active++;
    srv.handoff().crash_copy_changed();
    c->client_.eof = e.client_eof;
    c->client_.shut = e.client_shut;
    c->upstream_.eof = e.upstream_eof;
    c->upstream_.shut = e.upstream_shut;
    if (c->client_.eof && c->upstream_.eof) {  // both FINs passed on: only the closes were left
        c->close("done");
        return true;
    }
    if (!c->client_.eof) uv_read_start(stream(c->client_.tcp), on_alloc, on_read_cb);
    if (!c->upstream_.eof) uv_read_start(stream(c->upstream_.tcp), on_alloc, on_read_cb);
    if (c->client_.eof || c->upstream_.eof) srv.watch_half_closed();
    if (up.removed) c->close_later_for_removal(static_cast<uint64_t>(srv.config().s.drain_timeout.count()));
    return true;
}

void Connection::close(const char* reason, bool reset_client, bool reset_upstream) {
    if (closing_) return;
    closing_ = true;
    if (options_deferred_) {
        options_deferred_ = false;
        srv_.upstream_options_done(options_gen_);
    }
    if (up_) up_->active--;
    KPRISM_DEBUG("connection closed", {{"reason", reason},
                                       {"upstream", up_ ? up_->name : std::string("-")},
                                       {"duration_ms", static_cast<uint64_t>(uv_now(srv_.loop()) - started_ms_)}});
    if (timer_open_) {
        timer_open_ = false;
        uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_closed);
    }
    if (stored_) srv_.handoff().crash_copy_changed();
    auto close_side = [&](Side& s, bool reset) {
        if (!s.open) return;
        s.open = false;
        uv_os_fd_t fd;
        if (stored_ && uv_fileno(handle(s.tcp), &fd) == 0) {
            if (reset) {  // tcp_disconnect(): RST, as SO_LINGER 0 would at the last close
                sockaddr unspec{};
                unspec.sa_family = AF_UNSPEC;
                ::connect(fd, &unspec, sizeof unspec);
            } else if (!srv_.handoff().handing_over()) {
                ::shutdown(fd, SHUT_RDWR);
            }
            uv_close(handle(s.tcp), on_closed);
            return;
        }
        if (!reset || uv_tcp_close_reset(&s.tcp, on_closed) != 0) uv_close(handle(s.tcp), on_closed);
    };
    close_side(client_, reset_client);
    close_side(upstream_, reset_upstream);
}

void Connection::on_closed(uv_handle_t* h) {
    Connection* c = owner(h);
    c->open_handles_--;
    c->handle_closed();
}

void Connection::handle_closed() {
    if (open_handles_ > 0) return;
    srv_.connection_closed(this);
    delete this;
}

}  // namespace kprism
