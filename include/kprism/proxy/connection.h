// SPDX-License-Identifier: Apache-2.0
// One client connection spliced to one upstream: connect (with retries), then bytes both ways.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>

#include "kprism/handoff/record.h"
#include "kprism/proxy/selection.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

class Server;
struct Upstream;

// Owns its two sockets (client and upstream, raw descriptors in the Server's SplicePoll) and one
// timer handle. Created by Connection::accept or resume, it deletes itself in the timer's close
// callback, which libuv runs after the poll phase: an event already taken from the set for a
// socket closed in the same pass still finds the Connection (and a closed side, which ignores it).
class Connection {
public:
    // Takes a socket just accepted (owned from here: closed on every failure) and starts
    // connecting it upstream.
    static void accept(Server& srv, int fd);
    // SplicePoll's handler: one event for the socket tagged `tag` (Connection::tag).
    static void on_poll(uint64_t tag, uint32_t events);

    // Starts closing (idempotent). `reset` sends RST to the client instead of FIN.
    void close(const char* reason, bool reset_client = false, bool reset_upstream = false);

    // The upstream is down: close this connection after `delay_ms` if it may still be closed for
    // that then (ControlPlane::may_close_for_down). False when it cannot be scheduled (closing,
    // not yet spliced, or awaiting its first answer: the first-response timer moves it instead).
    bool close_later_for_down(uint64_t delay_ms);
    bool down_pending() const { return timer_for_ == TimerFor::down; }
    // The upstream was removed by a reload: let the connection finish for up to `drain_ms`.
    void close_later_for_removal(uint64_t drain_ms);
    // Rebalancing moves this connection: close it after `delay_ms` if its upstream is still up
    // (the client reconnects and lands on an under-share upstream).
    void close_later_for_rebalance(uint64_t delay_ms);
    // Established, bound to its upstream, and no close already scheduled: rebalancing may move it.
    bool movable() const {
        return state_ == State::splicing && !closing_ && timer_for_ == TimerFor::none &&
               !(awaiting_answer_ && !first_flight_.empty());
    }
    bool rebalance_pending() const { return timer_for_ == TimerFor::rebalance; }
    uint64_t started_ms() const { return started_ms_; }  // uv_now() when it was accepted

    // Handover to the next process (handoff/fd_store.cc). pause_for_handover() stops reading both
    // ways and any timer; a connection not yet spliced is closed instead (false). quiescent():
    // nothing of ours in flight (no write or FIN queued), so its sockets hold every byte.
    bool pause_for_handover();
    bool quiescent() const { return !client_.len && !upstream_.len && !client_.fin_owed && !upstream_.fin_owed; }
    // Its two descriptors and its record entry; false when it has none to give. The crash copy
    // (handoff/crash_copy.cc) takes connections with writes in flight too (flushed_only = false), but
    // not one that may still be replayed to another upstream.
    bool handover_entry(handover::Entry& e, int& client_fd, int& upstream_fd, bool flushed_only = true);
    // Its sockets are in the crash copy: a copy held by systemd keeps a socket open after kprism
    // closes its own, so close() then ends the connection itself (shutdown, or a reset by
    // connect(AF_UNSPEC)) unless the connection is being handed over.
    void mark_stored() { stored_ = true; }
    // A connection handed over by the previous process: takes both descriptors (closed on
    // failure, false) and resumes splicing to `up` in the half-closed state the entry records.
    static bool resume(Server& srv, int client_fd, int upstream_fd, Upstream& up, const handover::Entry& e);

    // Called by the Server's half-close sweep about once a second while some connection is
    // half-closed. A peer whose FIN was read is no longer read, so its later reset would go unseen
    // while the other peer is idle: when its socket has reached TCP_CLOSE,
    // the connection closes and resets the other peer. Returns whether it still needs the sweep.
    bool check_half_closed();

    // Called by the Server's options sweep: sets the upstream socket's TCP options (tcp group) if
    // they are still deferred (Server::upstream_options_deferred); later upstream sockets of this
    // connection (retries) get them at once.
    void apply_deferred_options();
    bool options_waiting(unsigned gen) const { return options_deferred_ && options_gen_ == gen; }

    bool closing() const { return closing_; }
    bool splicing() const { return state_ == State::splicing; }
    Upstream* upstream() const { return up_; }

    // Links of the Server's list of live connections (IntrusiveList).
    Connection* prev = nullptr;
    Connection* next = nullptr;

private:
    enum class State { connecting, splicing };
    enum class TimerFor { none, connect, first_response, down, removed, rebalance };

    // One socket. Bytes read from it wait in `buf` (a pooled chunk, held only while they wait)
    // until the other side's socket takes them; while they wait, this socket is not read
    // (backpressure), and the other side is written again when it reports EPOLLOUT.
    struct Side {
        int fd = -1;                   // open while >= 0
        char* buf = nullptr;           // pooled chunk; null while idle
        uint32_t off = 0;              // buf[off, off + len): read from this side, not yet written to the other
        uint32_t len = 0;
        uint8_t gen = 0;               // upstream: counts its sockets (retries), so a closed one's event is told apart
        bool eof = false;              // peer sent FIN (we read EOF)
        bool shut = false;             // we sent FIN to this side
        bool fin_owed = false;         // the other side's FIN goes to this one once the bytes before it are written
        uint32_t unread = 0;           // events it reported while it could not be read: read once it can
        bool wrote = false;            // upstream: a write was made (the next may set TCP_NODELAY)
        bool nodelay = false;          // upstream: TCP_NODELAY is set
    };

    explicit Connection(Server& srv);
    ~Connection();

    Upstream* pick(uint64_t now);
    void start_attempt();
    // `reason` is the text for logs; `why` is what the bookkeeping counts.
    void attempt_failed(ConnectFailure why, const char* reason, bool upstream_fault);
    void connect_finished(uint32_t events);
    void start_splicing();
    void on_events(Side& s, uint32_t events);
    // Reads `from` until it would block, after `events` (epoll's) said it has something to read.
    void drain(Side& from, uint32_t events);
    // `fin_follows`: `from`'s FIN is known to come right after these bytes (see flush()).
    void on_data(Side& from, Side& to, size_t n, bool fin_follows);
    void on_eof(Side& from, Side& to);
    void on_read_error(Side& from, Side& to, int err);
    // Writes what waits in `from` into `to`; false when the connection closed meanwhile.
    // `fin_follows` (or a FIN owed to `to`): the FIN goes out in the same segment as the last of
    // these bytes when the socket takes them all at once.
    bool flush(Side& from, Side& to, bool fin_follows = false);
    void send_fin(Side& to);
    void before_write(Side& to);
    void release(Side& s);
    void close_socket(Side& s, bool reset);
    void drop_upstream_socket();
    // How long the current upstream attempt has lasted (its connection's age on that upstream).
    uint64_t attempt_age_ms() const;
    uint64_t tag(const Side& s) const {
        return reinterpret_cast<uintptr_t>(this) | (&s == &upstream_ ? 1u : 0u) | (s.gen & 3u) << 1;
    }
    void maybe_finish();
    // `s` sent its FIN and was not sent ours: its socket is in CLOSE_WAIT until we close it.
    static bool only_peer_finished(const Side& s) { return s.fd >= 0 && s.eof && !s.shut && !s.fin_owed; }
    void answered();
    void stop_awaiting_answer();
    void keep_first_flight(const char* p, size_t n);
    static constexpr size_t kMaxFirstFlight = 16 * 1024;
    // Reads of one socket per event before it is re-armed (SplicePoll::rearm) so the other
    // sockets get their turn: with 64 KiB chunks, 1 MiB.
    static constexpr int kReadsPerEvent = 16;
    bool try_replay(ConnectFailure why, const char* reason);
    Side& other(Side& s) { return &s == &client_ ? upstream_ : client_; }

    static void on_timer(uv_timer_t* t);
    static void on_closed(uv_handle_t* h);

    Server& srv_;
    Side client_;
    Side upstream_;
    uv_timer_t timer_{};
    State state_ = State::connecting;
    Upstream* up_ = nullptr;
    TriedSet tried_ = 0;
    uint32_t attempts_ = 0;
    bool closing_ = false;
    bool timer_open_ = false;
    bool stored_ = false;  // mark_stored()
    bool shared_ = false;  // its sockets were given out (handover_entry): another process may hold them
    bool paused_ = false;  // pause_for_handover(): neither side is read any more
    bool options_deferred_ = false;  // counted in the Server's options_pending_[options_gen_]
    uint8_t options_gen_ = 0;
    bool options_swept_ = false;     // the options sweep has passed: new upstream sockets get them at once
    // When the current upstream attempt began, in ms after started_ms_ (32 bits fill padding
    // here: no bytes added per connection).
    uint32_t attempt_offset_ms_ = 0;
    uint64_t started_ms_ = 0;
    TimerFor timer_for_ = TimerFor::none;
    // Until the upstream sends its first byte, a copy of the client's bytes (bounded, e.g. a TLS
    // ClientHello) is kept so a silent upstream can be swapped for another. Empty otherwise.
    bool awaiting_answer_ = false;
    std::string first_flight_;
};

}  // namespace kprism
