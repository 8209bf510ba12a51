// SPDX-License-Identifier: Apache-2.0
// Health bookkeeping: checkers and their results, passive failures, hostname endpoints (every
// address an upstream, added and removed as the name's answer changes), up/down changes, closes on
// down, no-ready episodes, the credentials condition's consequences, and applying a reloaded
// endpoint list.
#include "kprism/upstreams/control_plane.h"

#include <fmt/format.h>
#include <malloc.h>

#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <type_traits>
#include <utility>

#include "kprism/proxy/connection.h"
#include "kprism/discovery/membership.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/daemon/server.h"

namespace kprism {

namespace {

// Hostnames compare without regard to case (validation refuses two that differ only so).
bool same_name(const HostPort& a, const HostPort& b) {
    return a.port == b.port && strcasecmp(a.host.c_str(), b.host.c_str()) == 0;
}

// The hostname endpoint `name` in `cfg`, or nullptr when it is not configured there.
const Endpoint* configured_name(const Config& cfg, const HostPort& name) {
    for (const Endpoint& e : cfg.endpoints)
        if (!e.addr.is_ip && same_name(e.addr, name)) return &e;
    return nullptr;
}

}  // namespace

ControlPlane::ControlPlane(Server& srv, Stats& stats)
    : srv_(srv), stats_(stats), membership_(std::make_unique<Membership>(*this)) {
    const Config& cfg = srv.config();
    tls_ = std::make_unique<TlsClientContext>(cfg.s.client_cert, cfg.s.client_key, cfg.s.ca_file);
    for (const auto& e : cfg.endpoints) {
        if (e.addr.is_ip) ups_.add(e.addr, e.zone, e.server_name);
        else add_name(e);
    }
    ups_.node_zone = cfg.s.zone;
    ups_.rise_fall.rise = static_cast<uint32_t>(cfg.s.health_rise);
    ups_.rise_fall.fall = static_cast<uint32_t>(cfg.s.health_fall);
    ups_.on_change = [this](Upstream& u, Health old) { on_health_change(u, old); };
}

ControlPlane::~ControlPlane() = default;

uv_loop_t* ControlPlane::loop() const { return srv_.loop(); }
const Config& ControlPlane::config() const { return srv_.config(); }
const OwnListeners& ControlPlane::own_listeners() const { return srv_.own_listeners(); }
const DiscoveryStatus* ControlPlane::discovery() const { return membership_->discovery(); }
const SnapshotStatus& ControlPlane::snapshot() const { return membership_->snapshot(); }

void ControlPlane::start() {
    uv_timer_init(loop(), &resolve_timer_);
    resolve_timer_.data = this;
    uv_timer_init(loop(), &hold_timer_);
    hold_timer_.data = this;
    uv_timer_init(loop(), &trim_timer_);
    trim_timer_.data = this;
    started_ = true;
    Resolver::Options ro;
    ro.timeout_ms = kResolveTimeoutMs;
    ro.max_addresses = kMaxNameAnswer;  // kMaxNameAddresses is applied after the refused ones are skipped
    if (const char* servers = std::getenv(kTestDnsServersEnv); servers && *servers) {
        ro.servers = servers;
        log::warn("test DNS servers in use instead of those of /etc/resolv.conf", {{"servers", ro.servers}});
    }
    resolver_ = std::make_unique<Resolver>(loop(), ro);
    for (auto& n : names_) resolve(*n);
    for (size_t i = 0; i < ups_.size(); ++i) refuse_if_own(ups_[i]);
    arm_resolve_timer(config());
    // First probes spread over up to a second (kprism restarts on many nodes at once after a
    // rollout); after that every checker drifts on its own jittered period.
    for (size_t i = 0; i < ups_.size(); ++i)
        start_checker(ups_[i], random_below(std::min<uint64_t>(1000, config().s.health_interval.count())));
    if (config().s.discovery_enabled) membership_->start();
}

void ControlPlane::close() {
    if (closed_) return;
    closed_ = true;
    membership_->close();
    for (auto& c : checkers_)
        if (c) c->close();
    if (resolver_) resolver_->close();
    if (started_) {
        uv_close(reinterpret_cast<uv_handle_t*>(&resolve_timer_), nullptr);
        uv_close(reinterpret_cast<uv_handle_t*>(&hold_timer_), nullptr);
        uv_close(reinterpret_cast<uv_handle_t*>(&trim_timer_), nullptr);
    }
}

void ControlPlane::start_checker(Upstream& u, uint64_t first_delay_ms) {
    if (checkers_.size() <= u.index) checkers_.resize(u.index + 1);
    stop_checker(u);
    checkers_[u.index] = std::make_unique<HealthChecker>(*this, u);
    checkers_[u.index]->start(first_delay_ms);
}

void ControlPlane::stop_checker(Upstream& u) {
    if (u.index >= checkers_.size() || !checkers_[u.index]) return;
    checkers_[u.index]->close();
    if (checkers_[u.index]->closed()) checkers_[u.index].reset();  // never started: no callback to wait for
    else retired_checkers_.push_back(std::move(checkers_[u.index]));
}

void ControlPlane::checker_closed(HealthChecker* c) {
    auto it = std::find_if(retired_checkers_.begin(), retired_checkers_.end(),
                           [c](const std::unique_ptr<HealthChecker>& p) { return p.get() == c; });
    if (it == retired_checkers_.end()) return;  // closed by close(): freed with the ControlPlane
    std::swap(*it, retired_checkers_.back());
    retired_checkers_.pop_back();
    // The first emptying since the last trim starts the timer; a pending one is not re-armed.
    if (retired_checkers_.empty() && started_ && !closed_ &&
        !uv_is_active(reinterpret_cast<uv_handle_t*>(&trim_timer_)))
        uv_timer_start(&trim_timer_, on_trim_timer, kTrimDelayMs, 0);
}

void ControlPlane::on_trim_timer(uv_timer_t*) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

size_t ControlPlane::checkers_allocated() const {
    size_t n = retired_checkers_.size();
    for (const auto& c : checkers_) n += c != nullptr;
    return n;
}

bool ControlPlane::all_judged() const {
    if (creds_.rejected()) return true;
    for (size_t i = 0; i < ups_.size(); ++i)
        if (!ups_[i].removed && ups_[i].health == Health::unknown) return false;
    // A name without an address is an endpoint that has no verdict either.
    for (const auto& n : names_)
        if (!has_address(*n)) return false;
    return true;
}

bool ControlPlane::fallback_allowed() const {
    return config().fail_mode == FailMode::open || tls_->get() == nullptr || ups_.up_count() > 0 || creds_.rejected();
}

std::string ControlPlane::summary() const {
    size_t live = 0;
    for (size_t i = 0; i < ups_.size(); ++i) live += !ups_[i].removed;
    for (const auto& n : names_) live += !has_address(*n);
    size_t up = ups_.up_count();
    std::string s = fmt::format("{}/{} upstreams ready", up, live);
    if (up == 0) s += fallback_allowed() ? " (fail-open)" : " (fail-closed)";
    if (creds_.rejected()) s += ", client certificate rejected";
    return s;
}

void ControlPlane::record_check(Upstream& u, CheckResult r, const std::string& error, bool explicit_down,
                                uint64_t generation, const FailingChecks& checks) {
    uint64_t now = uv_now(loop());
    ProbeMark prev = u.probe;
    u.probe = ProbeMark{true, r, now, generation};
    Credentials::Outcome out = creds_.on_result(ups_, u, prev, now, tls_->generation());
    if (cert_verdict_of(r) == CertVerdict::accepted && generation == tls_->generation()) u.rejection_logged = false;
    const bool first_pass = !u.passed_check;
    if (out.hold) ups_.note(u, r, error, now, checks);
    else ups_.record(u, r, error, explicit_down, now, checks);
    if (first_pass && u.passed_check) membership_->passed_first_check(u);
    on_credentials(out, u, now);
    review();
}

SSL_CTX* ControlPlane::refresh_tls(uint64_t now_ms) {
    SSL_CTX* ctx = tls_->refresh(now_ms);
    if (tls_->generation() == tls_generation_seen_) return ctx;
    const bool first = tls_generation_seen_ == 0;
    tls_generation_seen_ = tls_->generation();
    if (first) return ctx;
    for (size_t i = 0; i < ups_.size(); ++i) ups_[i].rejection_logged = false;
    if (creds_.on_rotation()) {
        log::info("client certificate no longer rejected: it rotated; checking every apiserver again",
                  {{"reason", "rotated"}, {"client_cert", config().s.client_cert}, {"subject", tls_->subject()}});
        srv_.health_changed();
    }
    check_all_soon(nullptr);
    return ctx;
}

void ControlPlane::check_all_soon(const Upstream* except) {
    for (size_t i = 0; i < checkers_.size(); ++i)
        if (checkers_[i] && (!except || except->index != i)) checkers_[i]->check_soon();
}

// What follows from a step of the credentials condition (credentials.h).
void ControlPlane::on_credentials(const Credentials::Outcome& out, Upstream& u, uint64_t now) {
    switch (out.event) {
    case Credentials::Event::none: return;
    case Credentials::Event::round_started: check_all_soon(&u); return;
    case Credentials::Event::entered:
        log_rejected_by_all(u);
        srv_.health_changed();
        return;
    case Credentials::Event::left:
        log::info("client certificate no longer rejected: an apiserver accepts it",
                  {{"reason", "accepted"}, {"upstream", u.name}});
        srv_.health_changed();
        return;
    case Credentials::Event::partial: break;
    }
    // Some apiservers accept the certificate: those that rejected it in the round are
    // misconfigured for this node, and their rejections count as failed checks after all.
    for (size_t i = 0; i < ups_.size(); ++i) {
        Upstream& w = ups_[i];
        const ProbeMark& m = w.probe;
        if (w.removed || !m.has || m.result != CheckResult::unauthorized || m.at_ms < out.round_start_ms ||
            m.generation != tls_->generation())
            continue;
        if (!w.rejection_logged)
            log::error("health check unauthorized: the apiserver does not accept kprism's client certificate, "
                       "others do; this is a misconfiguration, not an unready apiserver",
                       {{"upstream", w.name}, {"error", w.last_error}, {"client_cert", config().s.client_cert},
                        {"subject", tls_->subject()}});
        w.rejection_logged = true;
        if (&w != &u || out.hold) ups_.apply(w, CheckResult::unauthorized, w.last_error, false, now, true);
    }
}

// The one line of the condition: who the certificate is and when it ends, not per upstream.
void ControlPlane::log_rejected_by_all(const Upstream& u) const {
    size_t rejecting = 0;
    for (size_t i = 0; i < ups_.size(); ++i)
        rejecting += !ups_[i].removed && ups_[i].probe.has && ups_[i].probe.result == CheckResult::unauthorized;
    const int64_t not_after = tls_->not_after();
    const int64_t remaining = not_after - static_cast<int64_t>(std::time(nullptr));
    char expiry[32] = "?";
    auto na = static_cast<time_t>(not_after);
    struct tm tm {};
    if (not_after != 0 && gmtime_r(&na, &tm)) strftime(expiry, sizeof expiry, "%Y-%m-%dT%H:%M:%SZ", &tm);
    log::error("client certificate rejected by every apiserver: the node's credentials, not the apiservers; "
               "failing open, no connection is closed",
               {{"client_cert", config().s.client_cert},
                {"subject", tls_->subject()},
                {"not_after", expiry},
                {"expired", not_after != 0 && remaining <= 0},
                {"remaining", format_duration(Duration{remaining * 1000})},
                {"upstreams", static_cast<uint64_t>(rejecting)},
                {"error", u.last_error}});
}

void ControlPlane::passive_failure(Upstream& u, ConnectFailure why, std::string_view detail,
                                   uint64_t attempt_started_ms) {
    uint64_t now = uv_now(loop());
    ++stats_.connect_failures;
    ups_.connect_failed(u, why, detail, now);
    // Without a client certificate there are no checks, so passive failures only order the fallback.
    // An attempt that began before the upstream's health last changed says nothing about it now:
    // after an outage, failing open, the connects that hung on it while it was unreachable time
    // out just after it came back up and would take it down again at once (flapping).
    bool stale = u.last_change_ms > attempt_started_ms;
    if (tls_->get() && u.health != Health::down && !stale)
        ups_.record(u, check_result_of(why), fmt::format("client connection: {}", detail), false, now);
    if (u.index < checkers_.size() && checkers_[u.index]) checkers_[u.index]->check_soon();
    review();
}

void ControlPlane::note_closed_for_down() { ++stats_.closed_for_down; }

// A burst of connections ended by the apiserver says more than one: it may be shutting down (its
// /readyz then fails "shutdown") or shedding connections. Young connections do not count: a
// client's short request on a "Connection: close" answer ends on the server's side too.
void ControlPlane::upstream_ended(Upstream& u, uint64_t age_ms) {
    static_assert(std::extent_v<decltype(Upstream::upstream_ends_ms)> == kCloseBurst);
    if (age_ms < kCloseBurstMinAgeMs) return;
    uint64_t now = uv_now(loop());
    u.upstream_ends_ms[u.upstream_ends_next] = now;
    u.upstream_ends_next = static_cast<uint8_t>((u.upstream_ends_next + 1) % kCloseBurst);
    for (uint64_t t : u.upstream_ends_ms)
        if (t == 0 || now - t > kCloseBurstWindowMs) return;
    std::fill(std::begin(u.upstream_ends_ms), std::end(u.upstream_ends_ms), 0);  // one check per burst
    ++u.close_bursts;
    log::info("upstream closed many connections at once: checking it now",
              {{"upstream", u.name}, {"closed", static_cast<uint64_t>(kCloseBurst)},
               {"within", format_duration(Duration{static_cast<int64_t>(kCloseBurstWindowMs)})}});
    if (u.index < checkers_.size() && checkers_[u.index]) checkers_[u.index]->check_soon();
}

// The one line per no-ready episode; down for etcd, the closes wait to tell one apiserver without
// etcd from all of them (hold_closes). The closes themselves follow from review()'s rule.
void ControlPlane::on_health_change(Upstream& u, Health old) {
    size_t up = ups_.up_count();
    if (u.health == Health::down) membership_->upstream_down(u);
    if (u.health == Health::up) membership_->settle_departures();
    if (u.health != Health::down) {
        u.close_held_since_ms = 0;
        u.close_hold = nullptr;
    }
    if (u.health == Health::down && config().s.close_on_down && u.failing_checks.etcd() && !etcd_quorum_lost_)
        hold_closes(u);
    if (up == 0 && (all_judged() || old == Health::up) && !failing_open_) {
        failing_open_ = true;
        ++stats_.fail_open_episodes;
        log::error(config().fail_mode == FailMode::open
                       ? "no upstream ready: failing open, connections go to every endpoint"
                       : "no upstream ready: failing closed, new connections are refused",
                   {{"upstreams", static_cast<uint64_t>(ups_.size())}});
    } else if (up > 0 && failing_open_) {
        failing_open_ = false;
        log::info("an upstream is ready again: no-ready episode over", {{"upstream", u.name}});
    }
    srv_.health_changed();
}

void ControlPlane::hold_closes(Upstream& u) {
    u.close_held_since_ms = std::max<uint64_t>(uv_now(loop()), 1);
    KPRISM_DEBUG("down for etcd: closes wait for the other upstreams' checks", {{"upstream", u.name}});
    for (size_t i = 0; i < ups_.size(); ++i)
        if (&ups_[i] != &u && !ups_[i].removed && i < checkers_.size() && checkers_[i])
            checkers_[i]->check_soon(true, false);
    arm_hold_timer();
}

// Quorum: every live upstream down for etcd is one event, logged once with its end; nothing is
// closed meanwhile (there is nowhere better to go). A held upstream whose peers have all answered
// since (or whose hold ran out) without that is one apiserver losing etcd: its closes go ahead.
void ControlPlane::review() {
    size_t live = 0, etcd_down = 0;
    std::string names;
    for (size_t i = 0; i < ups_.size(); ++i) {
        const Upstream& v = ups_[i];
        if (v.removed) continue;
        ++live;
        if (v.health == Health::down && v.failing_checks.etcd()) {
            ++etcd_down;
            names += (names.empty() ? "" : ",") + v.name;
        }
    }
    if (!etcd_quorum_lost_ && live > 0 && etcd_down == live) {
        etcd_quorum_lost_ = true;
        srv_.handoff().health_changed();  // the crash copy's record has the condition
        log::error("control plane has no etcd quorum: every apiserver fails its etcd checks; closing nothing, "
                   "connections go to every endpoint until one is ready",
                   {{"upstreams", names}});
    } else if (etcd_quorum_lost_ && ups_.up_count() > 0) {
        etcd_quorum_lost_ = false;
        srv_.handoff().health_changed();
        std::string first;
        for (size_t i = 0; i < ups_.size() && first.empty(); ++i)
            if (!ups_[i].removed && ups_[i].health == Health::up) first = ups_[i].name;
        log::info("control plane has etcd quorum again: an apiserver is ready", {{"upstream", first}});
    }
    const uint64_t now = uv_now(loop());
    const auto hold = 2 * static_cast<uint64_t>(config().s.health_fast_interval.count());
    for (size_t i = 0; i < ups_.size(); ++i) {
        Upstream& u = ups_[i];
        if (u.close_held_since_ms == 0) continue;
        if (u.health != Health::down || u.removed || etcd_quorum_lost_) {
            u.close_held_since_ms = 0;
            continue;
        }
        bool peers_answered = true;
        for (size_t j = 0; j < ups_.size(); ++j)
            if (j != i && !ups_[j].removed && ups_[j].last_result_ms <= u.close_held_since_ms) peers_answered = false;
        if (!peers_answered && now - u.close_held_since_ms < hold) continue;
        u.close_held_since_ms = 0;
    }
    arm_hold_timer();
    close_stranded();
}

void ControlPlane::arm_hold_timer() {
    if (!started_ || closed_) return;
    const auto hold = 2 * static_cast<uint64_t>(config().s.health_fast_interval.count());
    const uint64_t now = uv_now(loop());
    uint64_t due = UINT64_MAX;
    for (size_t i = 0; i < ups_.size(); ++i)
        if (ups_[i].close_held_since_ms != 0) due = std::min(due, ups_[i].close_held_since_ms + hold);
    if (due == UINT64_MAX) {
        uv_timer_stop(&hold_timer_);
        return;
    }
    uv_timer_start(&hold_timer_, on_hold_timer, due > now ? due - now : 0, 0);
}

void ControlPlane::on_hold_timer(uv_timer_t* t) { static_cast<ControlPlane*>(t->data)->review(); }

// Why the connections of a down upstream stay where they are now; nullptr: they may be closed.
// The holds kprism(8) documents, each until its condition ends.
const char* ControlPlane::close_hold(const Upstream& u) const {
    // Every apiserver rejects the certificate: the checks cannot judge the apiservers.
    if (creds_.rejected()) return "client certificate rejected by every apiserver";
    // Implies none up, but it is its own episode, logged with its end.
    if (etcd_quorum_lost_) return "no etcd quorum";
    if (ups_.up_count() == 0) return "no other upstream is up";
    // A rejected client certificate says nothing about the connections kubelet holds there: it
    // presents its own certificate and is already through.
    if (u.down_reason == DownReason::unauthorized) return "it rejects kprism's client certificate, not its clients'";
    if (u.close_held_since_ms != 0) return "down for etcd; waiting for the other upstreams' checks";
    return nullptr;
}

bool ControlPlane::may_close_for_down(const Upstream& u) const {
    return config().s.close_on_down && u.health == Health::down && !u.removed && !close_hold(u);
}

// The rule: once some upstream is up, no connection stays on a down one beyond close_spread (or
// the pace, for many), but during a hold of close_hold(). Run after every result (review()), so
// the end of a hold, another upstream coming up and a connection that became closable are all
// seen here. Connections already due to close for being down keep their moment.
void ControlPlane::close_stranded() {
    if (!config().s.close_on_down) return;
    bool any = false;
    for (size_t i = 0; i < ups_.size(); ++i) {
        Upstream& u = ups_[i];
        if (u.removed || u.health != Health::down || u.active == 0) continue;
        const char* hold = close_hold(u);
        if (hold && hold != u.close_hold)
            log::warn("not closing connections of the down upstream",
                      {{"upstream", u.name}, {"connections", u.active}, {"reason", hold}});
        u.close_hold = hold;
        any = any || !hold;
    }
    if (!any) return;
    std::vector<Connection*> due;
    srv_.connections().for_each([&](Connection* c) {
        Upstream* u = c->upstream();
        if (u && u->health == Health::down && !u->removed && !u->close_hold && c->splicing() && !c->closing() &&
            !c->down_pending())
            due.push_back(c);
    });
    if (due.empty()) return;
    // Each close at a random moment within close_spread, but never sooner than kDownCloseGapMs
    // after the one before it, whichever check scheduled that: one pace across all batches.
    const uint64_t now = uv_now(loop());
    const auto spread = static_cast<uint64_t>(config().s.close_spread.count());
    std::vector<uint64_t> at(due.size());
    for (auto& a : at) a = now + (spread ? random_below(spread) : 0);
    std::sort(at.begin(), at.end());
    std::vector<uint32_t> per(ups_.size(), 0);
    uint64_t last = now;
    for (size_t i = 0; i < due.size(); ++i) {
        const uint64_t when = std::max(at[i], next_down_close_ms_);
        if (!due[i]->close_later_for_down(when - now)) continue;
        ++per[due[i]->upstream()->index];
        next_down_close_ms_ = when + kDownCloseGapMs;
        last = when;
    }
    for (size_t i = 0; i < ups_.size(); ++i)
        if (per[i] > 0)
            log::info("closing connections of the down upstream",
                      {{"upstream", ups_[i].name}, {"connections", per[i]},
                       {"spread", format_duration(Duration{static_cast<int64_t>(last - now)})}});
}

bool ControlPlane::prepare_tls(const Config& next, std::unique_ptr<TlsClientContext>& fresh, std::string& error) {
    const Settings& now = config().s;
    if (next.s.client_cert == now.client_cert && next.s.client_key == now.client_key && next.s.ca_file == now.ca_file)
        return true;  // the same paths: re-read when applied, and a failure there keeps the old ones
    auto t = std::make_unique<TlsClientContext>(next.s.client_cert, next.s.client_key, next.s.ca_file);
    if (!t->load_now(uv_now(loop())) && tls_->get()) {
        error = fmt::format("the new TLS files do not load: {}; the client certificate in use stays",
                            t->last_error());
        return false;
    }
    fresh = std::move(t);
    return true;
}

void ControlPlane::reconfigure(const Config& next, std::unique_ptr<TlsClientContext> fresh, std::string& summary) {
    reconfigure_endpoints(next, summary);
    if (!fresh) {
        tls_->reread();  // SIGHUP also looks at the certificate files (below); the same bytes change nothing
    } else if (fresh->same_content(*tls_)) {
        tls_->take_paths(*fresh);
        summary += " tls_files=same_content";
        log::info("TLS file paths changed, their content did not; the client certificate in use stays",
                  {{"cert", next.s.client_cert}, {"key", next.s.client_key}, {"ca", next.s.ca_file}});
    } else if (fresh->get()) {
        const bool first = tls_->get() == nullptr;
        fresh->log_loaded(first, fresh->subject() != tls_->subject() || fresh->not_after() != tls_->not_after());
        tls_ = std::move(fresh);
        summary += " tls_files=changed";
    } else {  // the TLS bootstrap: none was in use, and the new paths do not load yet either
        fresh->log_not_loaded();
        tls_ = std::move(fresh);
        summary += " tls_files=not_loaded";
    }
    ups_.node_zone = next.s.zone;
    ups_.rise_fall.rise = static_cast<uint32_t>(next.s.health_rise);
    ups_.rise_fall.fall = static_cast<uint32_t>(next.s.health_fall);
}

void ControlPlane::reload_tls_now(std::string& summary) {
    const uint64_t seen = tls_generation_seen_;
    refresh_tls(uv_now(loop()));
    if (tls_generation_seen_ != seen && summary.find(" tls_files=") == std::string::npos)
        summary += " tls_files=reloaded";
}

// Endpoints kept stay as they are (state, connections); new ones are checked at once (a new
// hostname is resolved at once, each address checked); removed ones take no new connections and
// their connections drain for up to drain_timeout, those of a removed hostname's addresses too.
void ControlPlane::reconfigure_endpoints(const Config& next, std::string& summary) {
    std::vector<bool> keep(ups_.size(), false);
    for (const auto& e : next.endpoints) {
        if (!e.addr.is_ip) continue;
        if (Upstream* u = ups_.find(e.addr)) {
            keep[u->index] = true;
            if (!u->of_name.empty()) {  // an address of a name, now an endpoint of its own
                u->of_name.clear();
                u->hostname.clear();
                u->name = u->addr.str();
                membership_->keep(*u);
            }
            u->configured_zone = e.zone;
            u->settle_zone();
            u->server_name = e.server_name;
            u->source = Source::configured;
        }
    }
    auto drain = static_cast<uint64_t>(next.s.drain_timeout.count());
    for (size_t i = 0; i < keep.size(); ++i) {
        Upstream& u = ups_[i];
        if (keep[i] || u.removed || !u.of_name.empty()) continue;  // a name's addresses: below
        if (membership_->in_discovered(u)) {  // no longer configured, still in the slices
            if (u.source == Source::configured) u.source = Source::discovered;
            u.configured_zone.clear();  // the slices' zone, if any, is the one now
            u.settle_zone();
            continue;
        }
        if (u.source != Source::configured) continue;  // discovery decides about its own
        summary += " endpoint_removed=" + u.name;
        if (adopt_by_name(u, next)) continue;
        remove_upstream(u, "endpoint removed; its connections drain", drain);
    }
    for (auto it = names_.begin(); it != names_.end();) {
        NamedEndpoint& n = **it;
        if (const Endpoint* kept = configured_name(next, n.addr)) {
            n.zone = kept->zone;
            n.server_name = kept->server_name;
            for (Upstream* u : addresses_of(n)) {
                u->configured_zone = n.zone;
                u->settle_zone();
                u->server_name = n.server_name;
            }
            ++it;
            continue;
        }
        summary += " endpoint_removed=" + n.name;
        if (n.query != 0 && resolver_) resolver_->cancel(n.query);  // its callback never comes
        for (Upstream* u : addresses_of(n)) leave_name(*u, false, "endpoint removed; its connections drain", drain);
        it = names_.erase(it);
    }
    for (const auto& e : next.endpoints) {
        if (!e.addr.is_ip) {
            if (std::any_of(names_.begin(), names_.end(), [&](const auto& n) { return same_name(n->addr, e.addr); }))
                continue;
            add_name(e);
            summary += " endpoint_added=" + names_.back()->name;
            log::info("endpoint added", {{"upstream", names_.back()->name}});
            resolve(*names_.back());
            continue;
        }
        if (ups_.find(e.addr)) continue;
        Upstream* u = ups_.add(e.addr, e.zone, e.server_name);
        if (!u) {  // validation caps endpoints at kMaxUpstreams, but removed ones may still hold slots
            log::error("endpoint not added: every slot is held by a draining endpoint", {{"upstream", e.addr.str()}});
            continue;
        }
        summary += " endpoint_added=" + u->name;
        log::info("endpoint added", {{"upstream", u->name}});
        refuse_if_own(*u);
        start_checker(*u, random_below(200));
    }
    arm_resolve_timer(next);
}

// A configured IP endpoint removed by a reload whose address a name that stays resolved to last
// time (it was skipped there as this endpoint's): the upstream becomes that name's address, with its
// state and connections, rather than draining now and coming back unchecked at the next resolution.
bool ControlPlane::adopt_by_name(Upstream& u, const Config& next) {
    const std::string key = "," + sockaddr_str(u.sa) + ",";
    for (auto& np : names_) {
        NamedEndpoint& n = *np;
        const Endpoint* kept = configured_name(next, n.addr);
        // resolved_logged: the last answer's usable addresses, comma-separated.
        if (!kept || n.addr.port != u.addr.port || ("," + n.resolved_logged + ",").find(key) == std::string::npos)
            continue;
        const std::string was = u.name;
        u.of_name = n.name;
        u.hostname = n.addr.host;
        u.name = name_address_label(n.addr.host, u.sa);
        u.configured_zone = kept->zone;
        u.settle_zone();
        u.server_name = kept->server_name;
        membership_->keep(u);
        log::info("endpoint removed; its address stays as an address of a name that resolves to it",
                  {{"upstream", u.name}, {"was", was}, {"connections", u.active}});
        return true;
    }
    return false;
}

void ControlPlane::remove_upstream(Upstream& u, const char* msg, uint64_t drain_ms) {
    u.removed = true;
    log::info(msg, {{"upstream", u.name}, {"connections", u.active},
                    {"drain_timeout", format_duration(Duration{static_cast<int64_t>(drain_ms)})}});
    stop_checker(u);
    membership_->upstream_down(u);
    srv_.connections().for_each([&](Connection* c) {
        if (c->upstream() == &u) c->close_later_for_removal(drain_ms);
    });
    srv_.health_changed();
}

void ControlPlane::refuse_if_own(Upstream& u) {
    if (!u.resolved || !own_listeners().contains(as_sockaddr(u.sa))) return;
    log::error("endpoint is an address kprism listens on; kprism never connects to itself",
               {{"upstream", u.name}, {"address", sockaddr_str(u.sa)}});
    u.resolved = false;
    u.resolved_to_self = sockaddr_str(u.sa);
}

// Re-resolution runs only while some endpoint is a hostname, every resolve_interval.
void ControlPlane::arm_resolve_timer(const Config& cfg) {
    if (!started_ || closed_) return;  // the timer exists only between start() and close()
    if (names_.empty()) {
        uv_timer_stop(&resolve_timer_);
        return;
    }
    auto every = static_cast<uint64_t>(cfg.s.resolve_interval.count());
    if (uv_is_active(reinterpret_cast<uv_handle_t*>(&resolve_timer_)) && uv_timer_get_repeat(&resolve_timer_) == every)
        return;
    uv_timer_start(&resolve_timer_, on_resolve_timer, every, every);
}

void ControlPlane::on_resolve_timer(uv_timer_t* t) {
    auto* self = static_cast<ControlPlane*>(t->data);
    for (auto& n : self->names_) self->resolve(*n);
}

void ControlPlane::add_name(const Endpoint& e) {
    auto n = std::make_unique<NamedEndpoint>();
    n->addr = e.addr;
    n->name = e.addr.str();
    n->zone = e.zone;
    n->server_name = e.server_name;
    n->shown.addr = e.addr;
    n->shown.name = n->name;
    n->shown.zone = e.zone;
    n->shown.last_error = "not resolved yet";
    names_.push_back(std::move(n));
}

std::vector<Upstream*> ControlPlane::addresses_of(const NamedEndpoint& n) {
    std::vector<Upstream*> out;
    for (size_t i = 0; i < ups_.size(); ++i)
        if (!ups_[i].removed && ups_[i].of_name == n.name) out.push_back(&ups_[i]);
    return out;
}

std::vector<const Upstream*> ControlPlane::unresolved_names() const {
    std::vector<const Upstream*> out;
    for (const auto& n : names_)
        if (!has_address(*n)) out.push_back(&n->shown);
    return out;
}

bool ControlPlane::has_address(const NamedEndpoint& n) const {
    for (size_t i = 0; i < ups_.size(); ++i)
        if (!ups_[i].removed && ups_[i].of_name == n.name) return true;
    return false;
}

Upstream* ControlPlane::find_address(const sockaddr_storage& ss) {
    const std::string key = sockaddr_str(ss);
    for (size_t i = 0; i < ups_.size(); ++i)
        if (!ups_[i].removed && ups_[i].addr.is_ip && sockaddr_str(ups_[i].sa) == key) return &ups_[i];
    return nullptr;
}

void ControlPlane::resolve(NamedEndpoint& n) {
    if (n.query != 0 || !resolver_ || closed_) return;  // one resolution at a time per name
    std::string error;
    NamedEndpoint* np = &n;  // names_ holds it by pointer; a removed name's resolution is cancelled first
    n.query = resolver_->resolve(n.addr.host, [this, np](const ResolveResult& r) { on_resolved(*np, r); }, error);
    if (n.query == 0 && !n.failed_logged) {
        log::warn("cannot resolve endpoint; will retry",
                  {{"upstream", n.name}, {"error", error}, {"retry_in", format_duration(config().s.resolve_interval)}});
        n.failed_logged = true;
    }
}

void ControlPlane::leave_name(Upstream& u, bool wait, const char* msg, uint64_t drain_ms) {
    if (membership_->in_discovered(u)) {  // the slices still list it: discovery's again
        u.source = Source::discovered;
        u.of_name.clear();
        u.hostname.clear();
        u.name = u.addr.str();
        u.configured_zone.clear();
        u.settle_zone();
        u.server_name = config().s.server_name;
        log::info("endpoint address no longer resolved; still discovered, so it stays", {{"upstream", u.name}});
        return;
    }
    if (wait) membership_->depart(u);  // drains once an upstream that stays is up, like a departure
    else remove_upstream(u, msg, drain_ms);
}

// The answer for a name: new addresses are added and checked before use, those gone leave like
// discovered ones that left the slices. No answer, or none with an address, changes nothing: DNS
// may come up after kprism, or fail for a while, and the addresses there are stay.
void ControlPlane::on_resolved(NamedEndpoint& n, const ResolveResult& r) {
    n.query = 0;
    n.answered = true;
    if (closed_) return;
    if (r.error != ResolveError::none) {
        n.shown.last_error = fmt::format("not resolved: {}: {}", resolve_error_name(r.error), r.detail);
        if (!n.failed_logged)
            log::warn("cannot resolve endpoint; will retry",
                      {{"upstream", n.name}, {"error", resolve_error_name(r.error)}, {"detail", r.detail},
                       {"addresses_kept", static_cast<uint64_t>(addresses_of(n).size())},
                       {"retry_in", format_duration(config().s.resolve_interval)}});
        n.failed_logged = true;
        return;
    }
    n.failed_logged = false;
    n.shown.last_error = "resolves only to other endpoints' addresses, kprism's own, or refused ranges";
    // Never one of kprism's own listeners: a name that resolves to kprism itself would nest each
    // client connection into kprism. Never an address in a range discovery refuses either
    // (unspecified, link-local, multicast, ...: a DNS sinkhole answers 0.0.0.0, which Linux
    // connects to loopback), except loopback itself, which a name may mean ("localhost").
    const OwnListeners& own = own_listeners();
    std::vector<sockaddr_storage> want;
    std::vector<std::string> refused;
    std::string self, all;
    size_t over = 0;
    for (sockaddr_storage ss : r.addresses) {
        reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(n.addr.port);  // same offset for v6
        if (const char* range = refused_name_range(as_sockaddr(ss))) {
            const std::string a = sockaddr_str(ss);
            if (std::find(n.refused.begin(), n.refused.end(), a) == n.refused.end())
                log::warn("endpoint resolves to an address in a refused range; skipping that address",
                          {{"upstream", n.name}, {"address", a}, {"range", range}});
            refused.push_back(a);
            continue;
        }
        if (own.contains(as_sockaddr(ss))) {
            self += (self.empty() ? "" : ",") + sockaddr_str(ss);
            continue;
        }
        if (want.size() == kMaxNameAddresses) {  // usable ones past the limit (the answer is sorted)
            ++over;
            continue;
        }
        all += (all.empty() ? "" : ",") + sockaddr_str(ss);
        want.push_back(ss);
    }
    over += r.total - r.addresses.size();  // cut by the resolver itself (kMaxNameAnswer)
    if (over > 0) {
        if (!n.over_cap_logged)
            log::warn("endpoint resolves to more usable addresses than the limit; keeping the first in address order",
                      {{"upstream", n.name}, {"left_out", static_cast<uint64_t>(over)},
                       {"limit", static_cast<uint64_t>(kMaxNameAddresses)}});
        n.over_cap_logged = true;
    } else {
        n.over_cap_logged = false;
    }
    n.refused = std::move(refused);  // an address warned about again only once it was absent
    if (self != n.skipped_self) {
        if (!self.empty())
            log::warn("endpoint resolves to an address kprism listens on; skipping that address",
                      {{"upstream", n.name}, {"address", self}});
        n.skipped_self = self;
    }
    if (all != n.resolved_logged) {
        log::info("endpoint resolved", {{"upstream", n.name}, {"addresses", all.empty() ? "none" : all}});
        n.resolved_logged = all;
    }
    bool changed = false;
    std::string taken;
    for (const sockaddr_storage& ss : want) {
        Upstream* u = find_address(ss);
        if (u && u->of_name == n.name) {  // still there: stays, also if it was about to leave
            membership_->keep(*u);
            continue;
        }
        if (u && u->source != Source::configured) {  // discovered (or from the snapshot): now this name's
            u->source = Source::configured;
            u->of_name = n.name;
            u->hostname = n.addr.host;
            u->name = name_address_label(n.addr.host, u->sa);
            u->configured_zone = n.zone;
            u->settle_zone();
            u->server_name = n.server_name;
            membership_->keep(*u);
            log::info("endpoint address added: it was discovered, now it is configured", {{"upstream", u->name}});
            changed = true;
            continue;
        }
        if (u) {  // a configured IP endpoint, or another name's: one upstream per address
            taken += (taken.empty() ? "" : ",") + u->name;
            continue;
        }
        u = ups_.add_name_address(n.addr, ss, n.zone, n.server_name);
        if (!u) {
            log::error("endpoint address not added: every slot is held",
                       {{"upstream", name_address_label(n.addr.host, ss)}});
            continue;
        }
        log::info("endpoint address added; checked before use", {{"upstream", u->name}});
        start_checker(*u, random_below(200));
        changed = true;
    }
    if (taken != n.skipped_taken) {
        if (!taken.empty())
            log::info("endpoint resolves to an address that is another endpoint's; it stays that one",
                      {{"upstream", n.name}, {"address", taken}});
        n.skipped_taken = taken;
    }
    for (Upstream* u : addresses_of(n)) {
        const std::string key = sockaddr_str(u->sa);
        if (std::none_of(want.begin(), want.end(), [&](const sockaddr_storage& ss) { return sockaddr_str(ss) == key; })) {
            leave_name(*u, true, nullptr, 0);
            changed = true;
        }
    }
    // While no upstream is up the addresses lost wait; an answer that changes at every resolution
    // would otherwise pile them up until every slot is held. At most kMaxNameAddresses wait per
    // name: past that the oldest leave at once, their connections drained.
    std::vector<std::pair<long, Upstream*>> waiting;
    for (Upstream* u : addresses_of(n))
        if (long place = membership_->departing_place(*u); place >= 0) waiting.emplace_back(place, u);
    if (waiting.size() > kMaxNameAddresses) {
        std::sort(waiting.begin(), waiting.end());
        const auto drain = static_cast<uint64_t>(config().s.drain_timeout.count());
        for (size_t i = 0; i + kMaxNameAddresses < waiting.size(); ++i) {
            membership_->keep(*waiting[i].second);  // out of the departing list: removed here instead
            remove_upstream(*waiting[i].second,
                            "endpoint address no longer resolved; removed at once: its name has too many "
                            "addresses waiting to leave",
                            drain);
        }
        changed = true;
    }
    if (changed) srv_.health_changed();
}

uint64_t ControlPlane::carry_limit_ms() const {
    return static_cast<uint64_t>(config().s.health_interval.count()) * static_cast<uint64_t>(std::max<int64_t>(config().s.health_fall, 1));
}

void ControlPlane::review_resumed() { review(); }

handover::HealthRecord ControlPlane::carry_health() const {
    handover::HealthRecord r;
    r.at_ms = handover::boottime_ms();
    r.credentials = creds_.state();
    r.failing_open = failing_open_;
    r.etcd_quorum_lost = etcd_quorum_lost_;
    r.tls_content = tls_->content_hex();
    const uint64_t now = uv_now(loop());
    for (size_t i = 0; i < ups_.size(); ++i) {
        const Upstream& u = ups_[i];
        if (u.removed || !u.resolved) continue;
        handover::UpstreamHealth h;
        h.name = u.name;
        h.health = u.health;
        h.has_result = u.has_result;
        h.last_result = u.last_result;
        h.rises = u.rises;
        h.falls = u.falls;
        h.down_reason = u.down_reason;
        h.passed_check = u.passed_check;
        h.close_held = u.close_held_since_ms != 0;
        // No result yet: as old as can be, so that a verdict without one never carries.
        h.result_age_ms = u.has_result && now >= u.last_result_ms ? now - u.last_result_ms : UINT32_MAX;
        h.last_change_unix = u.last_change_unix;
        h.failing_checks = u.failing_checks;
        h.last_error = u.last_error;
        r.upstreams.push_back(std::move(h));
    }
    return r;
}

// Before the first client is accepted (Server::start, through Handoff::resume_handover). Nothing
// is logged per upstream: its state did not change; one line says what carried.
ControlPlane::Restored ControlPlane::restore_health(const handover::HealthRecord& r, uint64_t now_boottime_ms) {
    Restored out;
    const uint64_t now = uv_now(loop());
    const uint64_t since_written = now_boottime_ms > r.at_ms ? now_boottime_ms - r.at_ms : 0;
    const uint64_t limit = carry_limit_ms();
    for (const handover::UpstreamHealth& h : r.upstreams) {
        Upstream* u = nullptr;
        for (size_t i = 0; i < ups_.size() && !u; ++i)
            if (!ups_[i].removed && ups_[i].name == h.name) u = &ups_[i];
        // An address of a configured hostname endpoint, not resolved by this process yet.
        if (!u && h.name.find('@') != std::string::npos) u = upstream_for_handover(h.name);
        if (!u || !u->resolved) {
            ++out.not_present;
            continue;
        }
        if (!h.has_result) continue;  // nothing to carry: it is checked like a new one
        if (h.result_age_ms > limit || since_written > limit - h.result_age_ms) {
            ++out.too_old;
            continue;
        }
        ++out.carried;
        u->health = h.health;
        u->rises = h.rises;
        u->falls = h.falls;
        u->has_result = h.has_result;
        u->last_result = h.last_result;
        u->last_error = h.last_error;
        u->failing_checks = h.failing_checks;
        u->down_reason = h.down_reason;
        u->passed_check = u->passed_check || h.passed_check;
        u->last_change_unix = h.last_change_unix;
        // The result keeps its age (the next record says how old it really is, so that restarts
        // in a row never make a verdict younger than its last check); the change is "now" for
        // this process's rules (a passive failure's staleness).
        const uint64_t age = h.result_age_ms + since_written;
        u->last_result_ms = now > age ? now - age : 0;
        u->last_change_ms = now;
        u->close_held_since_ms = h.close_held && h.health == Health::down ? std::max<uint64_t>(now, 1) : 0;
    }
    // The node's conditions, under the same age rule (from when the record was written). The
    // episodes go on; the previous process logged their start.
    if (r.at_ms != 0 && since_written <= limit) {
        // A rejection was of the certificate the previous process had: with other files (fixed,
        // then kprism restarted) the condition does not carry, as a rotation would end it.
        const bool same_files = r.credentials != CredentialsState::rejected ||
                                (refresh_tls(now), tls_->content_hex() == r.tls_content);
        if (same_files) creds_.restore(r.credentials);
        failing_open_ = r.failing_open && ups_.up_count() == 0;
        etcd_quorum_lost_ = r.etcd_quorum_lost && ups_.up_count() == 0;
    }
    if (out.carried > 0) ups_.update_tiers_now();
    // The rest have no verdict: checked at once instead of within the start's spread. (An
    // upstream can carry its last result without a verdict: while every apiserver rejects the
    // client certificate, the rejections are not counted.)
    for (size_t i = 0; i < ups_.size(); ++i) {
        if (ups_[i].removed || ups_[i].health != Health::unknown) continue;
        ++out.unknown;
        if (i < checkers_.size() && checkers_[i]) checkers_[i]->check_soon();
    }
    arm_hold_timer();
    return out;
}

Upstream* ControlPlane::upstream_for_handover(const std::string& name) {
    for (size_t i = 0; i < ups_.size(); ++i)
        if (!ups_[i].removed && ups_[i].name == name) return &ups_[i];
    std::string host;
    HostPort ip;
    sockaddr_storage ss{};
    if (!parse_name_address_label(name, host, ip) || !ip_to_sockaddr(ip.host, ip.port, ss)) return nullptr;
    for (auto& n : names_) {
        if (n->addr.port != ip.port || strcasecmp(n->addr.host.c_str(), host.c_str()) != 0) continue;
        if (find_address(ss) || refused_name_range(as_sockaddr(ss)) || own_listeners().contains(as_sockaddr(ss)))
            return nullptr;
        Upstream* u = ups_.add_name_address(n->addr, ss, n->zone, n->server_name);
        if (!u) return nullptr;
        log::info("endpoint address added from the handover; checked, and kept while the name resolves to it",
                  {{"upstream", u->name}});
        start_checker(*u, random_below(200));
        return u;
    }
    return nullptr;
}

}  // namespace kprism
