// SPDX-License-Identifier: Apache-2.0
// The splice: accept, connect upstream with timeout and retries, replay a silent upstream's first
// flight elsewhere, then copy bytes both ways with backpressure (one pooled chunk per direction at
// most, none while idle), half-close, RST propagation, and closes when the upstream goes down.
// The sockets are raw descriptors in the Server's edge-triggered SplicePoll (splice_poll.h).
#include "kprism/proxy/connection.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kprism/base/log.h"
#include "kprism/daemon/server.h"
#include "kprism/proxy/sockopt.h"

namespace kprism {

namespace {
// Errors that are ours (fd or memory exhaustion), not the upstream's: they must not mark it down.
bool local_error(int status) {
    return status == UV_EMFILE || status == UV_ENFILE || status == UV_ENOBUFS || status == UV_ENOMEM ||
           status == UV_EADDRNOTAVAIL;
}

socklen_t sockaddr_len(const sockaddr_storage& sa) {
    return sa.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// The socket's pending error (SO_ERROR, which reading clears), as a positive errno; 0 for none.
int socket_error(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno;
}

constexpr uint32_t kHangup = EPOLLERR | EPOLLHUP;
// After a short read, the events that say more may still be queued: an error or hang-up (the next
// read returns it), or urgent data, at whose mark a read stops early.
constexpr uint32_t kReadOn = kHangup | EPOLLPRI;
// The events after which a socket is read.
constexpr uint32_t kReadable = EPOLLIN | EPOLLRDHUP | kReadOn;
}  // namespace

Connection::Connection(Server& srv) : srv_(srv) {}

Connection::~Connection() {
    release(client_);
    release(upstream_);
}

void Connection::accept(Server& srv, int fd) {
    static_assert(alignof(Connection) >= 8, "tag() keeps three bits below the pointer");
    auto* c = new Connection(srv);
    c->started_ms_ = uv_now(srv.loop());
    c->client_.fd = fd;
    uv_timer_init(srv.loop(), &c->timer_);
    c->timer_.data = c;
    c->timer_open_ = true;
    srv.connection_opened(c);
    if (srv.over_connection_limit()) {
        srv.note_rejected();
        c->close("max_connections reached", true);
        return;
    }
    if (int r = srv.splice_poll().add(fd, c->tag(c->client_)); r != 0) {
        KPRISM_DEBUG("cannot watch an accepted socket", {{"error", uv_strerror(r)}});
        c->close("cannot watch the client socket", true);
        return;
    }
    // The client socket inherited the TCP options from its listener (sockopt.h).
    c->start_attempt();
}

void Connection::on_poll(uint64_t tag, uint32_t events) {
    auto* c = reinterpret_cast<Connection*>(tag & ~uint64_t{7});
    Side& s = (tag & 1) ? c->upstream_ : c->client_;
    // A socket closed earlier in this pass (its fd is -1, or a retry's new socket has another gen).
    if (c->closing_ || s.fd < 0 || ((tag >> 1) & 3) != (s.gen & 3u)) return;
    c->on_events(s, events);
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
    const int fd = ::socket(up_->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        const int err = -errno;
        log::warn("cannot create upstream socket", {{"upstream", up_->name}, {"error", uv_strerror(err)}});
        up_->active--;
        up_ = nullptr;
        close("cannot create upstream socket", true);
        return;
    }
    upstream_.fd = fd;
    ++upstream_.gen;
    // The options wait for the Server's sweep (sockopt.h): a short connection costs one setsockopt
    // per attempt, TCP_QUICKACK's below. Not a user timeout under a second, which could act before
    // the sweep (0, none, does not).
    const auto user_timeout = srv_.config().s.tcp_user_timeout;
    if (options_swept_ || (user_timeout.count() > 0 && user_timeout < std::chrono::seconds(1))) {
        apply_tcp_options(fd, srv_.config().s);
        upstream_.nodelay = true;
    } else if (!options_deferred_) {
        options_deferred_ = true;
        options_gen_ = static_cast<uint8_t>(srv_.upstream_options_deferred());
    }
    hold_handshake_ack(fd);  // the handshake's last ACK rides on the first bytes (sockopt.h)
    // EINTR too goes on in the background (connect(2)); calling it again would give EALREADY.
    if (::connect(fd, as_sockaddr(up_->sa), sockaddr_len(up_->sa)) != 0 && errno != EINPROGRESS && errno != EINTR) {
        const int err = -errno;
        attempt_failed(connect_failure_from_uv(err), uv_strerror(err), !local_error(err));
        return;
    }
    // Added after the connect: the set reports the outcome (EPOLLOUT, or EPOLLERR) even if the
    // connect has already finished.
    if (int e = srv_.splice_poll().add(fd, tag(upstream_)); e != 0) {
        attempt_failed(ConnectFailure::other, uv_strerror(e), false);
        return;
    }
    timer_for_ = TimerFor::connect;
    uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(srv_.config().s.connect_timeout.count()), 0);
}

// The upstream socket reported while connecting: EPOLLERR with the reason in SO_ERROR, or
// EPOLLOUT once connected.
void Connection::connect_finished(uint32_t events) {
    int err = (events & kHangup) ? socket_error(upstream_.fd) : 0;
    if (err == 0 && !(events & EPOLLOUT)) return;
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    if (err != 0) {
        attempt_failed(connect_failure_from_uv(-err), uv_strerror(-err), !local_error(-err));
        return;
    }
    upstream_.unread = events & kReadable;  // it may have spoken first
    start_splicing();
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

// Gives up on the current upstream, records the failure, and retries elsewhere with a new socket.
void Connection::attempt_failed(ConnectFailure why, const char* reason, bool upstream_fault) {
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    Upstream* u = up_;
    u->active--;
    up_ = nullptr;
    drop_upstream_socket();
    if (upstream_fault) srv_.control().passive_failure(*u, why, reason, started_ms_ + attempt_offset_ms_);
    KPRISM_DEBUG("upstream connect failed", {{"upstream", u->name}, {"reason", reason}, {"attempt", attempts_}});
    if (!upstream_fault) {
        close(reason, true);
        return;
    }
    if (!closing_) start_attempt();
}

// Moves a connection whose upstream has not answered yet to another upstream, replaying the
// client's first flight there. False (nothing changed) when no other upstream is left to try.
bool Connection::try_replay(ConnectFailure why, const char* reason) {
    uint64_t now = uv_now(srv_.loop());
    if (!pick(now)) return false;
    Upstream* u = up_;
    KPRISM_DEBUG("moving connection", {{"from", u->name}, {"reason", reason}, {"replay_bytes", first_flight_.size()}});
    srv_.note_replayed();
    u->active--;
    up_ = nullptr;
    state_ = State::connecting;
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    drop_upstream_socket();
    srv_.control().passive_failure(*u, why, reason, started_ms_ + attempt_offset_ms_);
    if (closing_) return true;
    // The first flight waits in the client's chunk, as bytes read from it not yet written: the
    // client is not read again until the next upstream has taken them (start_splicing).
    if (!client_.buf && !(client_.buf = srv_.pools().buffers.get())) {
        close("out of buffers", true);
        return true;
    }
    std::memcpy(client_.buf, first_flight_.data(), first_flight_.size());
    client_.off = 0;
    client_.len = static_cast<uint32_t>(first_flight_.size());
    start_attempt();
    return true;
}

void Connection::start_splicing() {
    state_ = State::splicing;
    srv_.handoff().crash_copy_changed();
    srv_.control().upstreams().connect_succeeded(*up_);
    up_->total++;
    KPRISM_DEBUG("connection established", {{"upstream", up_->name}, {"attempts", attempts_}});
    if (awaiting_answer_ && !first_flight_.empty()) {
        // A replay: the client's first flight goes to the new upstream, and the client is read
        // again once it is written, so later bytes keep their order.
        timer_for_ = TimerFor::first_response;
        uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(srv_.config().s.first_response_timeout.count()), 0);
        if (!flush(client_, upstream_)) return;
    } else {
        awaiting_answer_ = srv_.config().s.first_response_timeout.count() > 0;
        if (up_->removed) close_later_for_removal(static_cast<uint64_t>(srv_.config().s.drain_timeout.count()));
    }
    // What arrived while connecting was not read, and its edge has passed: read it now.
    if (client_.unread) drain(client_, 0);
    if (upstream_.unread && !closing_) drain(upstream_, 0);
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
    if (upstream_.fd < 0 || closing_) return;  // a retry's next socket gets them in start_attempt
    apply_tcp_options(upstream_.fd, srv_.config().s, false, !upstream_.nodelay);
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
    set_tcp_nodelay(to.fd, srv_.config().s);
}

void Connection::release(Side& s) {
    if (s.buf) {
        srv_.pools().buffers.put(s.buf);
        s.buf = nullptr;
    }
    s.off = 0;
    s.len = 0;
}

// One event of one socket. While connecting, the upstream's says how the connect ended. Then:
// bytes waiting for this socket are written when it reports room (or an error, which the write
// then returns), and it is read when it reports bytes, a FIN or an error (drain() notes what it
// cannot read yet: the client while connecting, a side whose bytes wait, every side once paused).
void Connection::on_events(Side& s, uint32_t events) {
    if (state_ == State::connecting && &s == &upstream_) {
        connect_finished(events);
        return;
    }
    Side& peer = other(s);
    if (peer.len && (events & (EPOLLOUT | kHangup))) {
        if (!flush(peer, s)) return;
        if (!peer.len && peer.unread) drain(peer, 0);  // its edge passed while its bytes waited
        if (closing_ || s.fd < 0) return;
    }
    if (events & kReadable) drain(s, events);
}

// Reads `from` until it would block (the set is edge-triggered: it reports a socket again only
// when something new arrives), passing each chunk on. A side that cannot be read now (the client
// while connecting, one whose bytes still wait for the peer, any once paused) keeps the events in
// `unread` for the next drain. A short read took everything queued: the drain ends there unless
// the events told of an end or of urgent data. After EPOLLRDHUP without EPOLLERR or EPOLLPRI the
// FIN follows those bytes and costs no read of its own (EPOLLHUP beside it only says that both
// directions have ended: a reset always comes with EPOLLERR); after EPOLLERR (maybe a reset) or
// EPOLLHUP alone the next read tells which; after EPOLLPRI the read stopped at the urgent mark and
// the next goes on (the urgent byte itself is dropped, as without SO_OOBINLINE it always was: it
// is not passed on). After kReadsPerEvent full chunks the socket is re-armed, to be reported
// again after the others.
void Connection::drain(Side& from, uint32_t events) {
    Side& to = other(from);
    events |= std::exchange(from.unread, 0u);
    for (int i = 0; i < kReadsPerEvent; ++i) {
        if (closing_ || from.eof || from.fd < 0) return;
        if (paused_ || from.len || state_ != State::splicing) {
            from.unread = events | EPOLLIN;
            return;
        }
        if (!from.buf && !(from.buf = srv_.pools().buffers.get())) {
            on_read_error(from, to, ENOBUFS);
            return;
        }
        ssize_t n;
        do n = ::recv(from.fd, from.buf, BufferPool::kChunkSize, 0);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
            const bool short_read = static_cast<size_t>(n) < BufferPool::kChunkSize;
            const bool fin_next = short_read && (events & EPOLLRDHUP) && !(events & (EPOLLERR | EPOLLPRI));
            on_data(from, to, static_cast<size_t>(n), fin_next);
            if (!short_read) continue;
            if (closing_) return;
            if (fin_next) {
                on_eof(from, to);
                return;
            }
            if (events & kReadOn) continue;
            if (!from.len) release(from);
            return;
        }
        if (n == 0) {
            on_eof(from, to);
            return;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            release(from);
            return;
        }
        on_read_error(from, to, errno);
        return;
    }
    if (closing_ || from.eof || from.fd < 0) return;
    if (paused_ || from.len) {
        from.unread = events | EPOLLIN;
        return;
    }
    release(from);
    srv_.splice_poll().rearm(from.fd, tag(from));
}

void Connection::on_data(Side& from, Side& to, size_t n, bool fin_follows) {
    from.off = 0;
    from.len = static_cast<uint32_t>(n);
    if (&from == &client_) {
        up_->bytes_to_upstream += n;
        if (awaiting_answer_) keep_first_flight(from.buf, n);
    } else {
        up_->bytes_from_upstream += n;
        if (awaiting_answer_) answered();
    }
    flush(from, to, fin_follows);
}

// `from` sent its FIN: passed on to `to` after the bytes before it.
void Connection::on_eof(Side& from, Side& to) {
    const bool client_side = &from == &client_;
    // An upstream that closes before answering anything is treated like a silent one.
    if (!client_side && awaiting_answer_ && !first_flight_.empty() &&
        try_replay(ConnectFailure::hung_up, "closed before answering"))
        return;
    // The apiserver ended it first (not the client): a passive signal when many do at once. Its
    // age on this upstream: a connection moved here after a failed attempt elsewhere is young.
    if (!client_side && !to.eof)
        srv_.control().upstream_ended(*up_, attempt_age_ms());
    from.eof = true;
    if (client_side) stop_awaiting_answer();  // a half-closed client is never replayed
    srv_.watch_half_closed();  // from now on only the sweep sees a reset of `from`
    if (!from.len) release(from);
    // The last FIN: `to` finished first and nothing waits either way, so both sockets are read to
    // EOF and close(2) sends each its FIN (also the one still owed to `from`); shutdown(2) first
    // would only cost system calls.
    if (to.eof && !from.len && !to.len) {
        close("done");
        return;
    }
    if (from.len) {
        to.fin_owed = true;  // flush() sends it after the rest
        return;
    }
    send_fin(to);
}

void Connection::on_read_error(Side& from, Side& to, int err) {
    const bool client_side = &from == &client_;
    release(from);
    if (!client_side && awaiting_answer_ && !first_flight_.empty() &&
        try_replay(ConnectFailure::hung_up, "reset before answering"))
        return;
    if (!client_side && !to.eof && err != ENOBUFS)
        srv_.control().upstream_ended(*up_, attempt_age_ms());
    const char* reason = err == ENOBUFS ? "out of buffers" : client_side ? "client read error" : "upstream read error";
    // Propagate a reset to the other side so neither peer waits on a half-dead connection.
    close(reason, !client_side, client_side);
}

// Writes what waits in `from` into `to` with send(2) (not write(2): no file layer). What the
// socket does not take waits for its EPOLLOUT, and `from` is not read meanwhile. Once all is
// written the chunk goes back and a FIN owed to `to` follows. False when the connection closed.
// The last bytes before a FIN (`fin_follows`, or one owed) are sent with MSG_MORE: the kernel keeps
// a short tail back until the shutdown(2) or close(2) that comes next in this same call, which
// sends it and the FIN in one segment; a lone FIN would cost a segment and its acknowledgement.
// When the socket does not take everything, the kernel sends what it took without waiting (a
// window-limited rest goes with the acknowledgements of the bytes ahead of it), and the rest
// waits here as before, for EPOLLOUT; its flush then carries the FIN owed.
bool Connection::flush(Side& from, Side& to, bool fin_follows) {
    before_write(to);
    const int more = fin_follows || to.fin_owed ? MSG_MORE : 0;
    ssize_t r;
    do r = ::send(to.fd, from.buf + from.off, from.len, MSG_DONTWAIT | MSG_NOSIGNAL | more);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            close(&to == &client_ ? "client write error" : "upstream write error", &to != &client_, &to == &client_);
            return false;
        }
        r = 0;
    }
    from.off += static_cast<uint32_t>(r);
    from.len -= static_cast<uint32_t>(r);
    if (from.len) return true;
    release(from);
    if (to.fin_owed) send_fin(to);
    return !closing_;
}

// A shutdown(2) that fails (ENOTCONN: `to` was reset meanwhile) is not acted on here: reading
// `to` returns that reset, which closes the connection and passes it on.
void Connection::send_fin(Side& to) {
    to.fin_owed = false;
    ::shutdown(to.fd, SHUT_WR);
    to.shut = true;
    maybe_finish();
}

bool Connection::check_half_closed() {
    if (closing_ || state_ != State::splicing) return false;
    for (Side* s : {&client_, &upstream_}) {
        if (!only_peer_finished(*s) || !tcp_closed(s->fd)) continue;
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
    paused_ = true;  // bytes already read are still written (quiescent() waits for them)
    uv_timer_stop(&timer_);
    timer_for_ = TimerFor::none;
    return true;
}

bool Connection::handover_entry(handover::Entry& e, int& client_fd, int& upstream_fd, bool flushed_only) {
    if (closing_ || state_ != State::splicing || !up_ || (flushed_only ? !quiescent() : awaiting_answer_)) return false;
    if (client_.fd < 0 || upstream_.fd < 0) return false;
    apply_deferred_options();  // the next process takes the socket as it is
    e.client_local = handover::local_address(client_.fd);
    e.client_peer = handover::peer_address(client_.fd);
    e.upstream_local = handover::local_address(upstream_.fd);
    e.upstream_peer = handover::peer_address(upstream_.fd);
    if (e.client_local.empty() || e.client_peer.empty() || e.upstream_local.empty() || e.upstream_peer.empty())
        return false;  // a peer already gone (ENOTCONN): nothing worth handing over
    e.upstream = up_->name;
    e.client_eof = client_.eof;
    e.client_shut = client_.shut;
    e.upstream_eof = upstream_.eof;
    e.upstream_shut = upstream_.shut;
    e.age_ms = uv_now(srv_.loop()) - started_ms_;
    client_fd = client_.fd;
    upstream_fd = upstream_.fd;
    shared_ = true;  // another process may hold them from now on: close_socket() takes them out of the set
    return true;
}

bool Connection::resume(Server& srv, int client_fd, int upstream_fd, Upstream& up, const handover::Entry& e) {
    auto* c = new Connection(srv);
    uint64_t now = uv_now(srv.loop());
    c->started_ms_ = now > e.age_ms ? now - e.age_ms : 0;
    c->state_ = State::splicing;
    c->client_.fd = client_fd;
    c->upstream_.fd = upstream_fd;
    c->shared_ = true;  // systemd's store may still hold them (a crash copy not yet dropped)
    uv_timer_init(srv.loop(), &c->timer_);
    c->timer_.data = c;
    c->timer_open_ = true;
    srv.connection_opened(c, true);
    int r = 0;
    for (Side* s : {&c->client_, &c->upstream_}) {
        // Non-blocking already (the flag is the socket's, and the previous process set it), but
        // that process may have been another build: checked once per resumed socket.
        const int flags = r == 0 ? ::fcntl(s->fd, F_GETFL) : 0;
        if (r == 0 && (flags < 0 || (!(flags & O_NONBLOCK) && ::fcntl(s->fd, F_SETFL, flags | O_NONBLOCK) != 0)))
            r = -errno;
        if (r == 0) r = srv.splice_poll().add(s->fd, c->tag(*s));
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
    // Just added to the set, each socket is reported at once if it has something to read.
    if (c->client_.eof || c->upstream_.eof) srv.watch_half_closed();
    if (up.removed) c->close_later_for_removal(static_cast<uint64_t>(srv.config().s.drain_timeout.count()));
    return true;
}

// Closes one socket; `reset` sends RST instead of FIN. A socket in the crash copy stays open in
// systemd's copy after close(2), so it is ended here first (shutdown, or a reset by
// connect(AF_UNSPEC) as SO_LINGER 0 would do at the last close), unless it is being handed over.
// One given out at all may be open elsewhere, so it leaves the set before it is closed.
void Connection::close_socket(Side& s, bool reset) {
    if (s.fd < 0) return;
    if (stored_ && reset) {
        sockaddr unspec{};
        unspec.sa_family = AF_UNSPEC;
        ::connect(s.fd, &unspec, sizeof unspec);
    } else if (stored_) {
        if (!srv_.handoff().handing_over()) ::shutdown(s.fd, SHUT_RDWR);
    } else if (reset) {
        linger zero{1, 0};
        ::setsockopt(s.fd, SOL_SOCKET, SO_LINGER, &zero, sizeof zero);
    }
    if (shared_) srv_.splice_poll().remove(s.fd);
    ::close(s.fd);
    s.fd = -1;
    release(s);
}

uint64_t Connection::attempt_age_ms() const { return uv_now(srv_.loop()) - (started_ms_ + attempt_offset_ms_); }

// The attempt's socket is closed and the side starts afresh; the generation goes on counting, so
// an event of the closed socket still in this pass is told apart (on_poll).
void Connection::drop_upstream_socket() {
    close_socket(upstream_, false);
    upstream_ = Side{.gen = upstream_.gen};
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
    if (stored_) srv_.handoff().crash_copy_changed();
    close_socket(client_, reset_client);
    close_socket(upstream_, reset_upstream);
    if (timer_open_) {
        timer_open_ = false;
        uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_closed);
    }
}

// The last of the Connection: close callbacks run in libuv's turn (uv_run), which SplicePoll::run
// starts only after the whole batch of events it took has been handled, so no event taken from
// the set can still name it.
void Connection::on_closed(uv_handle_t* h) {
    auto* c = static_cast<Connection*>(h->data);
    c->srv_.connection_closed(c);
    delete c;
}

}  // namespace kprism
