// SPDX-License-Identifier: Apache-2.0
// Membership from discovery: admitting discovered endpoints (checked before use), draining those
// that left (never the configured floor, never leaving nothing up; the addresses a hostname
// endpoint lost too), the snapshot read at start and written after each change.
#include "kprism/discovery/membership.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string_view>
#include <tuple>

#include "kprism/base/address_rules.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/discovery/discovery.h"
#include "kprism/discovery/snapshot.h"
#include "kprism/upstreams/control_plane.h"

namespace kprism {

namespace {

// "10.0.0.1:6443" / "[fd00::1]:6443" as the kernel prints the address: one spelling per address.
std::string canonical(const HostPort& hp) {
    sockaddr_storage ss;
    if (!hp.is_ip || !ip_to_sockaddr(hp.host, hp.port, ss)) return hp.str();
    return sockaddr_str(ss);
}

std::string canonical(const Upstream& u) { return u.addr.is_ip && u.resolved ? sockaddr_str(u.sa) : u.name; }

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::binary_search(v.begin(), v.end(), s);
}

}  // namespace

Membership::Membership(ControlPlane& cp) : cp_(cp) {}

Membership::~Membership() = default;

void Membership::close() {
    closed_ = true;
    if (discovery_) discovery_->close();
}

void Membership::drop_refused(std::vector<HostPort>& endpoints, const char* origin, const std::string& name) {
    const AddressRules rules(discovery_allowed(cp_.config()), cp_.own_listeners());
    const std::string from = fmt::format("{} {}", origin, name);
    auto it = refused_warned_.find(from);
    const std::unordered_set<std::string> none;
    const std::unordered_set<std::string>& before = it == refused_warned_.end() ? none : it->second;
    std::unordered_set<std::string> now;
    auto refused = [&](const HostPort& hp) {
        sockaddr_storage ss;
        std::string why = ip_to_sockaddr(hp.host, hp.port, ss) ? rules.refuse(as_sockaddr(ss)) : "not an IP address";
        if (why.empty()) return false;
        // A watch sends a slice again on every change: one warning per address it keeps naming.
        std::string addr = hp.str();
        if (!before.count(addr))
            log::warn("discovery: address refused", {{origin, name}, {"address", addr}, {"reason", why}});
        now.insert(std::move(addr));
        return true;
    };
    endpoints.erase(std::remove_if(endpoints.begin(), endpoints.end(), refused), endpoints.end());
    if (now.empty()) {
        if (it != refused_warned_.end()) refused_warned_.erase(it);
    } else if (it != refused_warned_.end()) {
        it->second = std::move(now);
    } else {
        refused_warned_.emplace(from, std::move(now));
    }
}

void Membership::forget_refused(const std::map<std::string, DiscoveredSlice>& slices) {
    std::erase_if(refused_warned_, [&](const auto& kv) {
        return kv.first.rfind("slice ", 0) == 0 && !slices.count(kv.first.substr(6));
    });
}

const DiscoveryStatus* Membership::discovery() const { return discovery_ ? &discovery_->status() : nullptr; }

Upstream* Membership::find_live(const HostPort& addr) {
    const std::string key = canonical(addr);
    UpstreamPool& ups = cp_.upstreams();
    for (size_t i = 0; i < ups.size(); ++i)
        if (!ups[i].removed && canonical(ups[i]) == key) return &ups[i];
    return nullptr;
}

bool Membership::in_discovered(const Upstream& u) const { return contains(discovered_, canonical(u)); }

void Membership::passed_first_check(const Upstream& u) {
    if (discovery_ && in_discovered(u)) write_snapshot();  // now a checked member
}

void Membership::upstream_down(const Upstream& u) {
    if (discovery_) discovery_->upstream_down(u);
}

// At start (discovery on): the snapshot's members are added as source=snapshot, then the watch
// begins. A snapshot that cannot be trusted is ignored with one warning; nothing here is fatal.
void Membership::start() {
    const Settings& s = cp_.config().s;
    snapshot_.path = s.discovery_snapshot_file;
    snapshot_path_ = s.discovery_snapshot_file;
    ca_sha256_ = file_sha256_hex(s.ca_file);
    if (s.discovery_snapshot_file.empty()) {
        snapshot_.state = "disabled";
    } else if (::access(s.discovery_snapshot_file.c_str(), F_OK) != 0 && errno == ENOENT) {
        snapshot_.state = "none";
        log::info("no discovery snapshot yet", {{"path", s.discovery_snapshot_file}});
    } else {
        DiscoverySnapshot snap;
        std::string why;
        const auto now = static_cast<int64_t>(std::time(nullptr));
        if (load_snapshot(s.discovery_snapshot_file, ca_sha256_, s.discovery_snapshot_max_age.count() / 1000, now, snap,
                          why)) {
            snapshot_.state = "loaded";
            snapshot_.written_unix = snap.written_unix;
            drop_refused(snap.endpoints, "snapshot", s.discovery_snapshot_file);
            for (const auto& e : snap.endpoints) {
                auto z = snap.zones.find(e.str());
                snapshot_set_.push_back(canonical(e) + " " + (z == snap.zones.end() ? "" : z->second));
            }
            std::sort(snapshot_set_.begin(), snapshot_set_.end());
            log::info("discovery snapshot loaded; its endpoints are checked before use",
                      {{"path", s.discovery_snapshot_file}, {"endpoints", static_cast<uint64_t>(snap.endpoints.size())},
                       {"age", format_duration(Duration{(now - snap.written_unix) * 1000})},
                       {"format", snap.checked ? "checked endpoints" : "version 1 (endpoints unchecked)"}});
            if (!snap.endpoints.empty()) {
                std::vector<HostPort> loaded = snap.endpoints;
                apply_discovered(std::move(snap.endpoints), Source::snapshot, snap.zones);
                for (const auto& e : loaded)
                    if (Upstream* u = find_live(e)) u->checked_earlier = snap.checked;
            }
        } else {
            snapshot_.state = "ignored";
            snapshot_.detail = why;
            log::warn("discovery snapshot ignored", {{"path", s.discovery_snapshot_file}, {"reason", why}});
        }
    }
    discovery_ = std::make_unique<Discovery>(cp_, *this);
    discovery_->start();
}

void Membership::apply_discovered(std::vector<HostPort> endpoints, Source src,
                                  const std::map<std::string, std::string>& zones) {
    if (closed_) return;
    UpstreamPool& ups = cp_.upstreams();
    // Each address once, in its one spelling (up to 32 slices of 1000 endpoints: no quadratic
    // work on the loop).
    std::vector<std::pair<std::string, HostPort>> want;
    std::unordered_set<std::string> seen;
    std::unordered_map<std::string, std::string> zone_of;  // by canonical address
    for (auto& e : endpoints) {
        std::string key = canonical(e);
        if (!seen.insert(key).second) continue;
        auto z = zones.find(e.str());
        if (z != zones.end()) zone_of.emplace(key, z->second);
        want.emplace_back(std::move(key), std::move(e));
    }
    if (want.empty()) {
        // A slice that lists nothing says nothing we can act on (a reconciler between writes, a
        // cluster being rebuilt): every upstream stays.
        if (!empty_warned_)
            log::warn("discovery: the slices list no endpoint; keeping every upstream",
                      {{"upstreams", static_cast<uint64_t>(ups.size())}});
        empty_warned_ = true;
        return;
    }
    empty_warned_ = false;
    if (want.size() > kMaxDiscovered) {
        // The ones already known first (no churn among them), then address order.
        std::unordered_set<std::string> known;
        for (size_t i = 0; i < ups.size(); ++i)
            if (!ups[i].removed) known.insert(canonical(ups[i]));
        std::vector<std::tuple<bool, std::string, HostPort>> order;
        order.reserve(want.size());
        for (auto& [key, hp] : want) order.emplace_back(!known.count(key), std::move(key), std::move(hp));
        std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
            return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
        });
        order.resize(kMaxDiscovered);
        want.clear();
        for (auto& [unknown, key, hp] : order) want.emplace_back(std::move(key), std::move(hp));
        if (!limit_warned_)
            log::warn("discovery: more endpoints than the limit; keeping the first",
                      {{"endpoints", static_cast<uint64_t>(want.size())}, {"limit", static_cast<uint64_t>(kMaxDiscovered)}});
        limit_warned_ = true;
    } else {
        limit_warned_ = false;
    }
    std::vector<std::string> next;
    for (const auto& w : want) next.push_back(w.first);
    std::sort(next.begin(), next.end());
    const bool changed = next != discovered_;
    discovered_ = next;

    for (auto& [key, hp] : want) {
        auto z = zone_of.find(key);
        const std::string zone = z == zone_of.end() ? "" : z->second;
        if (Upstream* u = find_live(hp)) {
            if (u->source == Source::snapshot && src == Source::discovered) u->source = Source::discovered;
            u->removal_waits = false;
            departing_.erase(std::remove(departing_.begin(), departing_.end(), key), departing_.end());
            set_discovered_zone(*u, zone);
            continue;
        }
        Upstream* u = ups.add(hp, "", cp_.config().s.server_name);
        if (!u) {
            log::error("discovered endpoint not added: every slot is held", {{"upstream", key}});
            continue;
        }
        u->source = src;
        u->discovered_zone = zone;
        u->settle_zone();
        log::info("discovery: endpoint discovered; checked before use",
                  {{"upstream", u->name}, {"source", source_name(src)}, {"zone", zone}});
        cp_.start_checker(*u, random_below(200));
    }
    // Those that left: configured ones stay (the floor), with no zone from the slices any more;
    // the rest drain once an upstream that stays is up.
    for (size_t i = 0; i < ups.size(); ++i) {
        Upstream& u = ups[i];
        if (u.removed || in_discovered(u)) continue;
        if (u.source == Source::configured) {
            set_discovered_zone(u, "");
            continue;
        }
        std::string key = canonical(u);
        if (std::find(departing_.begin(), departing_.end(), key) == departing_.end()) departing_.push_back(key);
    }
    settle_departures();
    if (src == Source::discovered) api_set_ = true;
    if (changed && src == Source::discovered) write_snapshot();  // else discovery_confirmed() keeps it fresh
}

// The zone the slices give `u` now; the one in force changes unless a configured zone is set
// (then a zone of the slices that differs is logged once per change, and ignored).
void Membership::set_discovered_zone(Upstream& u, const std::string& zone) {
    if (u.discovered_zone == zone) return;
    const std::string was = u.zone;
    u.discovered_zone = zone;
    u.settle_zone();
    if (u.zone != was) {
        log::info("discovery: endpoint zone changed", {{"upstream", u.name}, {"zone", u.zone}, {"was", was}});
    } else if (!zone.empty() && zone != u.configured_zone) {
        log::info("discovery: the slices give another zone; the configured zone stays",
                  {{"upstream", u.name}, {"zone", u.configured_zone}, {"slices_zone", zone}});
    }
}

// A slice that replaces every member at once never leaves kprism with nothing to send to.
void Membership::settle_departures() {
    if (departing_.empty()) return;
    UpstreamPool& ups = cp_.upstreams();
    bool staying_up = false;
    for (size_t i = 0; i < ups.size(); ++i) {
        const Upstream& u = ups[i];
        if (!u.removed && u.health == Health::up &&
            std::find(departing_.begin(), departing_.end(), canonical(u)) == departing_.end())
            staying_up = true;
    }
    const auto drain = static_cast<uint64_t>(cp_.config().s.drain_timeout.count());
    std::vector<std::string> waiting;
    for (const auto& key : departing_) {
        Upstream* u = nullptr;
        for (size_t i = 0; i < ups.size() && !u; ++i)
            if (!ups[i].removed && canonical(ups[i]) == key) u = &ups[i];
        if (!u) continue;
        const bool named = !u->of_name.empty();  // an address its hostname endpoint lost (depart())
        if (staying_up) {
            cp_.remove_upstream(*u,
                                named ? "endpoint address no longer resolved; its connections drain"
                                      : "discovery: endpoint left the slices; its connections drain",
                                drain);
        } else {
            if (!u->removal_waits)
                log::warn(named ? "endpoint address no longer resolved; removal waits until an upstream that stays is up"
                                : "discovery: removal waits until an upstream that stays is up",
                          {{"upstream", u->name}});
            u->removal_waits = true;
            waiting.push_back(key);
        }
    }
    departing_ = std::move(waiting);
}

void Membership::depart(const Upstream& u) {
    const std::string key = canonical(u);
    if (std::find(departing_.begin(), departing_.end(), key) == departing_.end()) departing_.push_back(key);
    settle_departures();
}

long Membership::departing_place(const Upstream& u) const {
    auto it = std::find(departing_.begin(), departing_.end(), canonical(u));
    return it == departing_.end() ? -1 : static_cast<long>(it - departing_.begin());
}

void Membership::keep(Upstream& u) {
    departing_.erase(std::remove(departing_.begin(), departing_.end(), canonical(u)), departing_.end());
    u.removal_waits = false;
}

// The members of the API's set that passed a check (in this process, or recorded so by the
// snapshot read at start) to the snapshot file, off the loop (a fsync can take a while); one write
// at a time, the newest set last. A member never seen ready is not written: after a restart during
// an API outage, the snapshot offers only addresses that were apiservers of this cluster.
void Membership::write_snapshot() {
    const Settings& s = cp_.config().s;
    const auto now = static_cast<int64_t>(std::time(nullptr));
    if (s.discovery_snapshot_file.empty() || !api_set_) return;
    std::vector<std::string> checked;  // "ip:port zone", sorted as discovered_ is
    DiscoverySnapshot snap;
    for (const auto& key : discovered_) {
        HostPort hp;
        if (!parse_host_port(key, hp, nullptr)) continue;
        const Upstream* u = find_live(hp);
        if (!u || !(u->passed_check || u->checked_earlier)) continue;
        checked.push_back(key + " " + u->discovered_zone);
        if (!u->discovered_zone.empty()) snap.zones.emplace(hp.str(), u->discovered_zone);
        snap.endpoints.push_back(std::move(hp));
    }
    if (checked.empty()) return;  // the file keeps what it has; its age tells
    if (checked == snapshot_set_ && now - snapshot_.written_unix < kSnapshotRefreshS && now >= snapshot_.written_unix)
        return;
    if (snapshot_writing_) {
        snapshot_again_ = true;
        return;
    }
    snap.written_unix = now;
    snap.ca_sha256 = ca_sha256_;
    snapshot_text_ = render_snapshot(snap);
    snapshot_written_pending_ = snap.written_unix;
    snapshot_pending_set_ = std::move(checked);
    snapshot_writing_ = true;
    snapshot_work_.data = this;
    if (uv_queue_work(cp_.loop(), &snapshot_work_, on_snapshot_work, on_snapshot_done) != 0) {
        snapshot_writing_ = false;
        log::warn("discovery snapshot not written", {{"path", s.discovery_snapshot_file}, {"error", "uv_queue_work"}});
    }
}

// On a threadpool thread: touches only the text and the outcome.
void Membership::on_snapshot_work(uv_work_t* w) {
    auto* self = static_cast<Membership*>(w->data);
    self->snapshot_ok_ = write_file_atomic(self->snapshot_path_, self->snapshot_text_, self->snapshot_error_);
}

void Membership::on_snapshot_done(uv_work_t* w, int status) {
    auto* self = static_cast<Membership*>(w->data);
    self->snapshot_writing_ = false;
    if (status == 0 && self->snapshot_ok_) {
        self->snapshot_.state = "written";
        self->snapshot_.detail.clear();
        self->snapshot_.written_unix = self->snapshot_written_pending_;
        self->snapshot_set_ = self->snapshot_pending_set_;
    } else {
        if (std::string_view(self->snapshot_.state) != "failed")
            log::warn("discovery snapshot not written", {{"path", self->snapshot_path_}, {"error", self->snapshot_error_}});
        self->snapshot_.state = "failed";
        self->snapshot_.detail = self->snapshot_error_;
    }
    if (self->snapshot_again_ && !self->closed_) {
        self->snapshot_again_ = false;
        self->write_snapshot();
    }
}

}  // namespace kprism
