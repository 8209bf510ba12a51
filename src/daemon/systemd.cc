// SPDX-License-Identifier: Apache-2.0
// The Server's side of systemd: sockets passed by socket activation, READY/STATUS, the watchdog.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "kprism/handoff/record.h"
#include "kprism/base/log.h"
#include "kprism/base/sd_notify.h"
#include "kprism/daemon/server.h"

namespace kprism {

namespace {

bool loopback_allowed(const Config& cfg, int fd, const sockaddr_storage& ss, std::string& error) {
    if (cfg.s.allow_non_loopback || is_loopback(ss)) return true;
    error = fmt::format("socket passed by systemd (fd {}) is bound to {}, not a loopback address "
                        "(set allow_non_loopback = true to do it anyway)",
                        fd, sockaddr_str(ss));
    return false;
}

}  // namespace

// Sockets named "data" become the listeners, "admin" is kept for the admin server. Also data: no
// name ("unknown") and systemd's default name, the socket unit's ("kprism.socket"). On failure
// nothing passed is left open.
bool Server::adopt_passed_sockets(std::string& error) {
    std::vector<notify::ListenFd> passed = notify::listen_fds(&error);
    if (!error.empty()) return false;
    // A restart in place (handoff/in_place.cc): the previous process's descriptors, inherited by exec.
    for (notify::ListenFd& x : handover::inherited_fds(&error)) passed.push_back(std::move(x));
    if (!error.empty()) {
        for (const notify::ListenFd& p : passed) ::close(p.fd);
        return false;
    }
    std::string addresses;
    auto fail = [&](size_t i) {
        for (size_t j = i; j < passed.size(); ++j) ::close(passed[j].fd);
        handoff_.close_passed();
        for (auto& l : listeners_) l->close();
        if (sd_.admin_fd >= 0) ::close(take_admin_fd());
        return false;
    };
    for (size_t i = 0; i < passed.size(); ++i) {
        const notify::ListenFd& p = passed[i];
        if (handover::is_handover_name(p.name)) {  // the previous process's (handoff/fd_store.cc)
            handoff_.keep_passed(p);
            continue;
        }
        const bool admin = p.name == "admin";
        if (!admin && p.name != "data" && p.name != "unknown" && !p.name.ends_with(".socket")) {
            log::warn("ignoring a socket passed by systemd: unknown FileDescriptorName (use data or admin)",
                      {{"fd", p.fd}, {"name", p.name}});
            ::close(p.fd);
            continue;
        }
        if (admin && sd_.admin_fd >= 0) {
            error = fmt::format("systemd passed more than one socket named admin (fd {} and {})", sd_.admin_fd, p.fd);
            return fail(i);
        }
        sockaddr_storage ss{};
        if (!inspect_listen_fd(p.fd, ss, error) || !loopback_allowed(cfg_, p.fd, ss, error)) return fail(i);
        if (admin) {
            sd_.admin_fd = p.fd;
            log::info("admin socket passed by systemd", {{"address", sockaddr_str(ss)},
                                                         {"fd", p.fd}});
            continue;
        }
        auto l = std::make_unique<Listener>();
        if (int r = l->start_fd(loop_, this, p.fd); r != 0) {
            error = fmt::format("cannot listen on the socket passed by systemd (fd {}, {}): {}", p.fd, l->name,
                                uv_strerror(r));
            listeners_.push_back(std::move(l));
            return fail(i + 1);
        }
        addresses += (addresses.empty() ? "" : ",") + l->name;
        listeners_.push_back(std::move(l));
    }
    if (listeners_.empty()) return true;
    sd_.socket_activated = true;
    std::string configured;
    for (const auto& a : cfg_.listen)
        configured += (configured.empty() ? "" : ",") + sockaddr_str(a);
    log::info("listening on sockets passed by systemd; bind_address and bind_port are ignored",
              {{"addresses", addresses}, {"ignored", configured}});
    return true;
}

// After the listeners are bound: the watchdog, and READY=1 now or once the first round is done.
void Server::start_systemd() {
    uv_timer_init(loop_, &sd_.ready_timer);
    uv_timer_init(loop_, &sd_.watchdog_timer);
    sd_.ready_timer.data = sd_.watchdog_timer.data = this;
    if (uint64_t usec = notify::watchdog_interval()) {
        // From the loop, at half the timeout, so that a wedged loop stops the pings.
        uint64_t every = std::max<uint64_t>(1, usec / 2000);
        uv_timer_start(&sd_.watchdog_timer, on_watchdog, every, every);
        log::info("systemd watchdog enabled", {{"timeout", fmt::format("{}us", usec)},
                                               {"ping_every", format_duration(Duration(every))}});
    }
    // Load the client certificate now: without one the checks are paused and there is no round to wait for.
    control_.tls().refresh(uv_now(loop_));
    maybe_ready();
    // First probes start within a second and each ends within health.timeout.
    if (!sd_.ready_sent)
        uv_timer_start(&sd_.ready_timer, on_ready_timeout, static_cast<uint64_t>(cfg_.s.health_timeout.count()) + 1000, 0);
}

void Server::health_changed() {
    if (draining_ || finished_) return;  // the STATUS then tells about the drain
    if (holding_ && control_.all_judged()) release_held("every upstream judged");
    handoff_.health_changed();
    rebalancer_.poke();
    if (!sd_.ready_sent) {
        maybe_ready();
        if (sd_.ready_sent) return;  // with its STATUS
    }
    notify::status(control_.summary());
}

// The first health round is done when every upstream has a verdict (its first result decides
// one), or at once when the checks are paused for lack of a client certificate.
void Server::maybe_ready() {
    if (sd_.ready_sent || draining_ || finished_) return;
    if (!control_.tls().get()) send_ready("health checks paused");
    else if (control_.all_judged()) send_ready("first health round done");
}

void Server::send_ready(const char* reason) {
    sd_.ready_sent = true;
    uv_timer_stop(&sd_.ready_timer);
    std::string st = control_.summary();
    notify::status(st);
    bool notified = notify::ready();
    log::info("ready", {{"reason", reason}, {"status", st}, {"notified_systemd", notified}});
}

void Server::on_ready_timeout(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    if (!self->sd_.ready_sent && !self->draining_) self->send_ready("first health round timed out");
}

void Server::on_watchdog(uv_timer_t*) { notify::watchdog(); }

}  // namespace kprism
