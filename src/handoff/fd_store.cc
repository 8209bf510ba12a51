// SPDX-License-Identifier: Apache-2.0
// Handoff: restarts that keep the established connections. SIGTERM under systemd with a file
// descriptor store hands the listening and connection sockets over to the next process instead of
// draining; at start, the next process takes them back (also a crash copy's, after a crash).
#include "kprism/handoff/handoff.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <map>

#include "kprism/proxy/connection.h"
#include "kprism/handoff/record.h"
#include "kprism/base/log.h"
#include "kprism/daemon/server.h"

namespace kprism {

namespace {

// How long the stopping process waits for the writes it has queued (bytes it already read) to
// reach their sockets; a connection whose peer reads nothing meanwhile is reset instead.
constexpr uint64_t kFlushWaitMs = 2000;
constexpr uint64_t kFlushPollMs = 10;
constexpr int kBarrierTimeoutMs = 5000;

// The whole memfd, at most kMaxRecordBytes (+1 so that a larger one fails to parse).
bool read_record(int fd, std::string& out, std::string& error) {
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        error = fmt::format("fstat: {}", std::strerror(errno));
        return false;
    }
    size_t size = std::min<size_t>(static_cast<size_t>(std::max<off_t>(st.st_size, 0)), handover::kMaxRecordBytes + 1);
    out.resize(size);
    size_t off = 0;
    while (off < size) {
        ssize_t n = ::pread(fd, out.data() + off, size - off, static_cast<off_t>(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<size_t>(n);
    }
    out.resize(off);
    return true;
}

}  // namespace

// Out, step 1: stop accepting (the listening sockets stay open through a duplicate, so clients
// queue in the backlog), stop reading every connection, close the ones not spliced yet.
void Handoff::begin_handover(const char* why) {
    srv_.release_held("handing over");  // clients still waiting for the first verdicts go first
    drop_crash_copy();  // this handover replaces it
    srv_.draining_ = true;
    handover_.active = true;
    // In place the PID stays: systemd (if any) sees a reload, ended by the new process's READY=1.
    if (handover_.in_place) notify::reloading();
    else notify::stopping();
    for (auto& l : srv_.listeners_) {
        uv_os_fd_t fd;
        if (!srv_.socket_activated() && l->open && uv_fileno(reinterpret_cast<uv_handle_t*>(&l->tcp), &fd) == 0)
            if (int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 3); d >= 0) handover_.listen_fds.push_back(d);
        l->close();
    }
    IntrusiveList<Connection>& conns = srv_.connections();
    conns.for_each([this](Connection* c) {
        if (!c->closing() && !c->pause_for_handover()) ++handover_.closed_unconnected;
    });
    log::info(handover_.in_place ? "restarting in place: handing connections over to the new executable"
                                 : "shutting down: handing connections over to the next process",
              {{"signal", why},
               {"connections", static_cast<uint64_t>(conns.size() - handover_.closed_unconnected)},
               {"closed_not_yet_connected", static_cast<uint64_t>(handover_.closed_unconnected)},
               {"fdstore_max", static_cast<uint64_t>(notify::fdstore_max())}});
    notify::status(fmt::format("handing over {} connections", conns.size()));
    handover_.deadline_ms = uv_now(srv_.loop()) + kFlushWaitMs;
    uv_timer_init(srv_.loop(), &handover_.timer);
    handover_.timer.data = this;
    uv_timer_start(&handover_.timer, on_handover_timer, 0, kFlushPollMs);
}

void Handoff::on_handover_timer(uv_timer_t* t) {
    auto* self = static_cast<Handoff*>(t->data);
    bool flushed = true;
    self->srv_.connections().for_each([&](Connection* c) { flushed = flushed && (c->closing() || c->quiescent()); });
    if (flushed || uv_now(self->srv_.loop()) >= self->handover_.deadline_ms) self->finish_handover();
}

// Out, step 2: every connection whose queued bytes are written goes into the store with the
// listeners and the record; then this process closes its copies and exits.
void Handoff::finish_handover() {
    uv_timer_stop(&handover_.timer);
    uv_close(reinterpret_cast<uv_handle_t*>(&handover_.timer), nullptr);
    std::vector<handover::Entry> entries;
    std::vector<int> fds;
    size_t unflushed = 0, not_passed = 0;
    std::vector<Connection*> stored, dropped;
    srv_.connections().for_each([&](Connection* c) {
        if (c->closing()) return;
        handover::Entry e;
        int cf = -1, uf = -1;
        if (!c->handover_entry(e, cf, uf) || entries.size() >= handover::kMaxEntries) {
            ++unflushed;
            dropped.push_back(c);
        } else {
            entries.push_back(std::move(e));
            fds.push_back(cf);
            fds.push_back(uf);
            stored.push_back(c);
        }
    });
    // The connection sockets travel queued inside one AF_UNIX socket, and under systemd only that
    // one goes into the store: systemd 252 compares every descriptor it stores with each one it
    // holds, which made 2000 sockets cost it 3.3 s of CPU (bench/history/restarts.md).
    // So does a restart in place: one descriptor to pass however many connections there are.
    std::string error;
    size_t sent_fds = 0;
    int carrier = handover::pack_fds(fds, sent_fds, error);
    const size_t passed = carrier >= 0 ? sent_fds / 2 : 0;  // connections, two sockets each
    for (size_t i = passed; i < stored.size(); ++i) dropped.push_back(stored[i]);
    not_passed = stored.size() - passed;
    stored.resize(passed);
    entries.resize(passed);
    if (!error.empty())
        log::warn("handover: not every connection could be passed on; those are reset",
                  {{"passed", static_cast<uint64_t>(passed)}, {"reset", static_cast<uint64_t>(not_passed)},
                   {"error", error}});
    error.clear();
    // Reset: their queued bytes were never written, so the peers must not take the end for a FIN.
    for (Connection* c : dropped) c->close("handover: not handed over", true, true);

    std::string record = handover::serialize(entries);
    int mfd = handover::record_memfd(record, error);
    bool ok = mfd >= 0 && (carrier >= 0 || entries.empty());
    if (!ok && mfd >= 0) error = "no socket to pass them";
    // What the control plane knows of each upstream, written now: the next process takes it back
    // before it accepts a client. Without it (no memfd) the next one checks before it routes.
    std::string health_error;
    int hfd = handover::record_memfd(handover::serialize_health(srv_.control().carry_health()), health_error);
    if (hfd < 0) log::warn("handover: the upstreams' health cannot be passed on", {{"error", health_error}});
    if (ok && handover_.in_place) {
        exec_in_place(handover_.listen_fds, carrier, mfd, hfd, entries.size());  // returns only if exec failed
        exit_code_ = 1;
        for (Connection* c : stored) c->close("restart in place failed", true, true);
        if (carrier >= 0) ::close(carrier);
        ::close(mfd);
        if (hfd >= 0) ::close(hfd);
        srv_.finish();
        return;
    }
    // The record last: a next process that finds it finds the sockets it names (and the health).
    ok = ok && notify::fdstore(handover::kListenerName, handover_.listen_fds.data(), handover_.listen_fds.size()) &&
         // FDPOLL=0: its sending end is closed, so it reports POLLHUP, which would make systemd drop it.
         (carrier < 0 || notify::fdstore(handover::kConnectionName, &carrier, 1, false)) &&
         (hfd < 0 || notify::fdstore(handover::kHealthName, &hfd, 1)) &&
         notify::fdstore(handover::kStateName, &mfd, 1);
    if (!ok && error.empty()) error = "sending to systemd's notify socket failed";
    bool barrier = ok && notify::barrier(kBarrierTimeoutMs);
    if (mfd >= 0) ::close(mfd);
    if (hfd >= 0) ::close(hfd);
    if (carrier >= 0) ::close(carrier);
    for (int fd : handover_.listen_fds) ::close(fd);
    handover_.listen_fds.clear();
    // Our copies only: systemd holds the sockets until the next process takes them.
    for (Connection* c : stored) c->close("handed over");
    if (ok)
        log::info("handed over to the next process",
                  {{"connections", static_cast<uint64_t>(entries.size())},
                   {"reset_unflushed", static_cast<uint64_t>(unflushed)},
                   {"reset_not_passed", static_cast<uint64_t>(not_passed)},
                   {"record_bytes", static_cast<uint64_t>(record.size())},
                   {"systemd_confirmed", barrier}});
    else
        log::warn("handover failed: connections closed", {{"connections", static_cast<uint64_t>(entries.size())},
                                                           {"error", error}});
    srv_.finish();
}

// In: start failed before the descriptors were used; nothing passed is left open.
void Handoff::close_passed() {
    for (const notify::ListenFd& p : handover_.passed) ::close(p.fd);
    handover_.passed.clear();
}

// In: a passed listening socket for `addr`. The others are closed by resume_handover().
int Handoff::take_handover_listener(const sockaddr_storage& addr) {
    std::string want = sockaddr_str(addr);
    for (auto it = handover_.passed.begin(); it != handover_.passed.end(); ++it) {
        if ((it->name != handover::kListenerName && it->name != handover::kCrashListenerName) ||
            handover::local_address(it->fd) != want)
            continue;
        int fd = it->fd;
        handover_.passed.erase(it);
        return fd;
    }
    return -1;
}

// In: the health record (handover::parse_health) onto the control plane; one line says what carried.
// No record (an older kprism's handover), or one that does not parse, carries nothing: every
// upstream is checked at once, and Server::hold_new_client keeps the first clients waiting.
void Handoff::restore_health(const std::string& text, const char* from) {
    handover::HealthRecord rec;
    std::string error;
    if (!text.empty() && !handover::parse_health(text, rec, error)) rec = {};
    ControlPlane::Restored r = srv_.control().restore_health(rec, handover::boottime_ms());
    const uint64_t age = rec.at_ms != 0 && handover::boottime_ms() > rec.at_ms ? handover::boottime_ms() - rec.at_ms : 0;
    log::info("upstream health taken over from the previous process",
              {{"from", from},
               {"carried", static_cast<uint64_t>(r.carried)},
               {"too_old", static_cast<uint64_t>(r.too_old)},
               {"not_configured", static_cast<uint64_t>(r.not_present)},
               {"unknown", static_cast<uint64_t>(r.unknown)},
               {"record_age", format_duration(Duration{static_cast<int64_t>(age)})},
               {"max_age", format_duration(Duration{static_cast<int64_t>(srv_.control().carry_limit_ms())})},
               {"error", text.empty() ? std::string("no health record") : error}});
}

// In: the record says which passed sockets pair up; each pair whose upstream is still configured
// resumes splicing. Whatever does not match is closed (its client reconnects), with one line.
// After a crash there is no handover record but the crash copy (crash_copy.cc): one generation,
// or two when the crash came between storing one and removing the other.
void Handoff::resume_handover() {
    if (handover_.passed.empty()) return;
    for (std::string_view name :
         {handover::kListenerName, handover::kConnectionName, handover::kStateName, handover::kHealthName})
        notify::fdstore_remove(name);
    for (const std::string& name : handover::crash_names()) notify::fdstore_remove(name);
    std::vector<notify::ListenFd> passed = std::move(handover_.passed);
    handover_.passed.clear();
    std::string record, error;
    std::vector<std::string> crash_records;
    size_t states = 0, unused_listeners = 0;
    std::map<std::string, int> socks;  // "local peer" -> fd
    std::string health, crash_health;
    for (const notify::ListenFd& p : passed) {
        if (p.name == handover::kHealthName || p.name == handover::kCrashHealthName) {
            std::string r, e;
            if (read_record(p.fd, r, e)) (p.name == handover::kHealthName ? health : crash_health) = std::move(r);
            ::close(p.fd);
        } else if (p.name == handover::kStateName) {
            if (states++ == 0 && !read_record(p.fd, record, error)) record.clear();
            ::close(p.fd);
        } else if (p.name.starts_with(handover::kCrashStatePrefix)) {
            std::string r, e;
            if (read_record(p.fd, r, e)) crash_records.push_back(std::move(r));
            ::close(p.fd);
        } else if (p.name == handover::kListenerName || p.name == handover::kCrashListenerName) {
            ++unused_listeners;  // not (or no longer) a configured address
            ::close(p.fd);
        } else {  // an AF_UNIX socket carrying connection sockets: the handover's or a crash copy's
            bool truncated = false;
            for (int fd : handover::unpack_fds(p.fd, truncated)) {
                std::string local = handover::local_address(fd), peer = handover::peer_address(fd);
                if (local.empty() || peer.empty() || !socks.emplace(local + " " + peer, fd).second) ::close(fd);
            }
            ::close(p.fd);
            if (truncated)
                log::warn("handover: some connection sockets could not be received (RLIMIT_NOFILE?); their "
                          "connections are closed");
        }
    }
    // The health first: the connections below are resumed onto upstreams that have their state.
    // A planned handover's record, else (after a crash) the crash copy's.
    if (!health.empty()) restore_health(health, "handover");
    else if (!crash_health.empty()) restore_health(crash_health, "crash copy");
    else restore_health("", "none");
    if (states == 0 && crash_records.empty() && socks.empty()) return;  // only listeners (a crash copy's)
    const bool after_crash = states == 0 && !crash_records.empty();
    std::vector<handover::Entry> entries;
    if (after_crash) {
        std::string why;
        entries = handover::merge(crash_records, why);
        if (!why.empty()) error = "crash copy: " + why;
    } else if (states != 1) {
        error = fmt::format("{} records passed, not one", states);
    } else if (error.empty()) {
        handover::parse(record, entries, error);
    }
    size_t resumed = 0, unmatched = 0;
    auto take = [&](const std::string& local, const std::string& peer) {
        auto it = socks.find(local + " " + peer);
        if (it == socks.end()) return -1;
        int fd = it->second;
        socks.erase(it);
        return fd;
    };
    for (const handover::Entry& e : entries) {
        int cf = take(e.client_local, e.client_peer), uf = take(e.upstream_local, e.upstream_peer);
        // An address of a hostname endpoint is not known before the name is resolved again: it
        // is added from the record (ControlPlane::upstream_for_handover).
        Upstream* up = srv_.control().upstream_for_handover(e.upstream);
        if (cf < 0 || uf < 0 || !up) {
            ++unmatched;
            if (cf >= 0) ::close(cf);
            if (uf >= 0) ::close(uf);
            continue;
        }
        if (Connection::resume(srv_, cf, uf, *up, e)) ++resumed;
    }
    srv_.control().review_resumed();  // those resumed onto an upstream that is down close as before
    size_t stray = socks.size();
    for (auto& [key, fd] : socks) ::close(fd);
    if (!error.empty())
        log::warn("handover record ignored: its connections are closed and their clients reconnect",
                  {{"reason", error}, {"sockets_closed", static_cast<uint64_t>(stray)}});
    log::info(after_crash ? "resumed connections kept from before a crash (keep_on_crash)"
                          : "resumed connections handed over by the previous process",
              {{"resumed", static_cast<uint64_t>(resumed)},
               {"closed_unmatched", static_cast<uint64_t>(unmatched)},
               {"closed_without_entry", static_cast<uint64_t>(error.empty() ? stray : 0)},
               {"listeners_not_configured", static_cast<uint64_t>(unused_listeners)}});
}

}  // namespace kprism
