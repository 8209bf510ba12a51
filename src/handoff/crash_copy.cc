// SPDX-License-Identifier: Apache-2.0
// Handoff: crash survival (keep_on_crash): a standing copy of the listeners and established
// connections in systemd's fd store, replaced as connections come and go, for the process started
// after a crash.
//
// The copy is what a planned handover stores (fd_store.cc), taken while kprism runs: the
// connection sockets queued in one AF_UNIX carrier socket, and the record naming their pairs. It is
// replaced at most once a second, and only when a connection was spliced or a copied one closed:
// a handful of notify messages, whatever the number of connections (bench/history/restarts.md).
// Connections spliced since the last copy are not in it. A crash loses whatever kprism had read
// and not yet written: an idle connection (a watch between events) resumes whole; one busy at the
// moment of the crash loses those bytes, which TLS detects, and its client reconnects.
#include "kprism/handoff/handoff.h"

#include <fmt/format.h>
#include <unistd.h>

#include "kprism/proxy/connection.h"
#include "kprism/handoff/record.h"
#include "kprism/base/log.h"
#include "kprism/daemon/server.h"

namespace kprism {

namespace {

constexpr uint64_t kCopyEveryMs = 1000;
// The health record is rewritten more often (a pwrite into the stored memfd, no message to
// systemd), and at once on every change of state: its verdicts are young enough to carry
// (ControlPlane::carry_limit_ms) even with health.interval at 1 s.
constexpr uint64_t kHealthEveryMs = 250;

}  // namespace

// At start, once whatever the previous process left has been resumed: on when configured and
// systemd keeps a store for kprism (the copy of the listeners and two generations fit in it).
void Handoff::start_crash_copy() {
    if (!srv_.config().s.keep_on_crash) return;
    const size_t need = srv_.listeners_.size() + 5;
    if (notify::fdstore_max() < need) {
        log::info("keep_on_crash: off, no file descriptor store to keep the connections in",
                  {{"fdstore_max", static_cast<uint64_t>(notify::fdstore_max())},
                   {"needed", static_cast<uint64_t>(need)},
                   {"hint", "under systemd: FileDescriptorStoreMax= and FDSTORE= (kprism(8), Restarts)"}});
        return;
    }
    crash_.on = true;
    crash_.changed = true;
    crash_.listeners_changed = !srv_.socket_activated();  // socket units keep theirs anyway
    uv_timer_init(srv_.loop(), &crash_.timer);
    crash_.timer.data = this;
    uv_timer_start(&crash_.timer, on_crash_timer, kHealthEveryMs, kHealthEveryMs);
    uv_unref(reinterpret_cast<uv_handle_t*>(&crash_.timer));
    log::info("keep_on_crash: keeping a copy of the connections in systemd's file descriptor store",
              {{"every", format_duration(Duration(kCopyEveryMs))}});
    copy_for_crash();  // resumed connections are covered at once
    // The upstreams' health: one memfd, stored once, rewritten in place (write_crash_health).
    std::string error;
    crash_.health_fd = handover::record_memfd(handover::serialize_health(srv_.control().carry_health()), error);
    if (crash_.health_fd >= 0 && !notify::fdstore(handover::kCrashHealthName, &crash_.health_fd, 1)) {
        ::close(crash_.health_fd);
        crash_.health_fd = -1;
        error = "sending to systemd's notify socket failed";
    }
    if (crash_.health_fd < 0)
        log::warn("keep_on_crash: the upstreams' health is not kept; after a crash they are checked first",
                  {{"error", error}});
}

void Handoff::on_crash_timer(uv_timer_t* t) {
    auto* self = static_cast<Handoff*>(t->data);
    if (self->srv_.draining()) return;
    if (self->crash_.changed && uv_now(self->srv_.loop()) - self->crash_.copied_ms >= kCopyEveryMs)
        self->copy_for_crash();
    self->write_crash_health();
}

void Handoff::health_changed() {
    if (crash_.on && !srv_.draining()) write_crash_health();
}

// The same file the store holds: a crash during the write leaves a record without its end line,
// which the next process ignores (it checks before it routes).
void Handoff::write_crash_health() {
    if (crash_.health_fd < 0) return;
    const std::string text = handover::serialize_health(srv_.control().carry_health());
    for (size_t off = 0; off < text.size();) {
        ssize_t n = ::pwrite(crash_.health_fd, text.data() + off, text.size() - off, static_cast<off_t>(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += static_cast<size_t>(n);
    }
    if (::ftruncate(crash_.health_fd, static_cast<off_t>(text.size())) != 0) return;
}

// A reload changed the listeners: a removed listener must not stay open in the crash copy.
void Handoff::listeners_changed() {
    if (!crash_.on) return;
    crash_.listeners_changed = true;
    copy_for_crash();
}

// Stores a new copy under the other generation, then removes the previous one.
void Handoff::copy_for_crash() {
    crash_.changed = false;
    crash_.copied_ms = uv_now(srv_.loop());
    if (crash_.listeners_changed) {
        crash_.listeners_changed = false;
        std::vector<int> fds;
        for (auto& l : srv_.listeners_) {
            uv_os_fd_t fd;
            if (l->open && uv_fileno(reinterpret_cast<uv_handle_t*>(&l->tcp), &fd) == 0) fds.push_back(fd);
        }
        notify::fdstore_remove(handover::kCrashListenerName);
        if (!fds.empty()) notify::fdstore(handover::kCrashListenerName, fds.data(), fds.size());
    }
    std::vector<handover::Entry> entries;
    std::vector<int> fds;
    std::vector<Connection*> copied;
    srv_.connections().for_each([&](Connection* c) {
        handover::Entry e;
        int cf = -1, uf = -1;
        if (entries.size() >= handover::kMaxEntries || !c->handover_entry(e, cf, uf, false)) return;
        entries.push_back(std::move(e));
        fds.push_back(cf);
        fds.push_back(uf);
        copied.push_back(c);
    });
    const unsigned next = crash_.generation ^ 1;
    std::string error;
    size_t sent = 0;
    int carrier = entries.empty() ? -1 : handover::pack_fds(fds, sent, error);
    const size_t kept = carrier >= 0 ? sent / 2 : 0;
    entries.resize(kept);
    for (size_t i = 0; i < kept; ++i) copied[i]->mark_stored();
    bool ok = kept > 0 || copied.empty();  // none of them queued: keep the previous copy
    if (kept > 0) {
        int mfd = handover::record_memfd(handover::serialize(entries), error);
        ok = mfd >= 0 && notify::fdstore(handover::crash_connection_name(next), &carrier, 1, false) &&
             notify::fdstore(handover::crash_state_name(next), &mfd, 1);
        if (mfd >= 0) ::close(mfd);
        if (!ok && error.empty()) error = "sending to systemd's notify socket failed";
        if (!ok) {  // whatever of it went in
            notify::fdstore_remove(handover::crash_connection_name(next));
            notify::fdstore_remove(handover::crash_state_name(next));
        }
    }
    if (carrier >= 0) ::close(carrier);
    if (!ok) {
        if (!crash_.failing)
            log::warn("keep_on_crash: cannot store a new copy; the previous one stays, trying again every second",
                      {{"error", error}});
        crash_.failing = true;
        crash_.changed = true;
        return;
    }
    if (crash_.failing) log::info("keep_on_crash: a new copy is stored again", {{"copied", static_cast<uint64_t>(kept)}});
    crash_.failing = false;
    if (crash_.connections > 0) {
        notify::fdstore_remove(handover::crash_connection_name(crash_.generation));
        notify::fdstore_remove(handover::crash_state_name(crash_.generation));
    }
    crash_.generation = next;
    crash_.connections = kept;
    const bool partial = kept < copied.size() || entries.size() == handover::kMaxEntries;
    if (partial != crash_.partial) {
        crash_.partial = partial;
        if (partial)
            log::warn("keep_on_crash: the copy holds only some connections; the others would not survive a crash",
                      {{"copied", static_cast<uint64_t>(kept)},
                       {"connections", static_cast<uint64_t>(srv_.active_connections())},
                       {"error", error.empty() ? "more than the record holds" : error},
                       {"hint", "descriptors in flight count against RLIMIT_NOFILE (LimitNOFILE=)"}});
        else
            log::info("keep_on_crash: the copy holds every established connection again",
                      {{"copied", static_cast<uint64_t>(kept)}});
    }
}

// A planned handover or a stop: the copy must not outlive this process (a next one would find
// connections closed since).
void Handoff::drop_crash_copy() {
    if (!crash_.on) return;
    crash_.on = false;
    for (const std::string& name : handover::crash_names()) notify::fdstore_remove(name);
    if (crash_.health_fd >= 0) ::close(crash_.health_fd);
    crash_.health_fd = -1;
    crash_.connections = 0;
    uv_close(reinterpret_cast<uv_handle_t*>(&crash_.timer), nullptr);
}

}  // namespace kprism
