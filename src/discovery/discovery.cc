// SPDX-License-Identifier: Apache-2.0
// EndpointSlice discovery: the list/watch cycle through an up upstream, its backoff, and the
// slices it holds, handed to the membership as one set after each change.
#include "kprism/discovery/discovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "kprism/upstreams/control_plane.h"
#include "kprism/discovery/membership.h"
#include "kprism/base/duration.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/base/version.h"

namespace kprism {

namespace {

constexpr const char* kPath =
    "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes";

}  // namespace

std::string discovery_request(std::string_view resource_version, uint64_t timeout_seconds, std::string_view host) {
    std::string target = kPath;
    if (resource_version.empty()) {
        target += "&limit=500";
    } else {
        if (!valid_resource_version(resource_version)) return {};
        target += fmt::format("&watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={}",
                              resource_version, timeout_seconds);
    }
    return fmt::format(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        target, host, kUserAgent);
}

Discovery::Discovery(ControlPlane& cp, Membership& members) : cp_(cp), members_(members) {}

Discovery::~Discovery() = default;

void Discovery::start() {
    uv_timer_init(cp_.loop(), &timer_);
    timer_.data = this;
    started_ = true;
    st_.enabled = true;
    arm(0, "waiting");
}

void Discovery::close() {
    if (closed_) return;
    closed_ = true;
    if (req_) req_->abort();
    req_ = nullptr;
    if (started_) uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
    st_.state = "off";
}

void Discovery::arm(uint64_t ms, const char* state) {
    st_.state = state;
    if (state != std::string_view("listing") && state != std::string_view("watching")) st_.via.clear();
    uv_timer_start(&timer_, on_timer, ms, 0);
}

void Discovery::on_timer(uv_timer_t* t) { static_cast<Discovery*>(t->data)->begin(); }

// One request at a time: the list when there is no resourceVersion to watch from, else the watch.
void Discovery::begin() {
    if (closed_ || req_) return;
    uint64_t now = uv_now(cp_.loop());
    SSL_CTX* ctx = cp_.refresh_tls(now);
    UpstreamPool& pool = cp_.upstreams();
    Upstream* up[kMaxUpstreams];
    size_t n = 0;
    for (size_t i = 0; i < pool.size(); ++i)
        if (pool[i].available(now)) up[n++] = &pool[i];
    if (!ctx || n == 0) {  // nothing to ask yet (start, an outage, no client certificate)
        arm(kWaitMs, "waiting");
        return;
    }
    via_ = up[random_below(n)];
    st_.via = via_->name;
    send(!st_.resource_version.empty() && !relist_ && !list_next_);
}

void Discovery::send(bool watch) {
    const Settings& s = cp_.config().s;
    uint64_t total = kListTimeoutMs;
    uint64_t secs = 0;
    if (watch) {
        secs = 300 + random_below(300);
        total = secs * 1000 + kWatchGraceMs;
        phase_ = Phase::watching;
        st_.state = "watching";
    } else {
        phase_ = Phase::listing;
        st_.state = "listing";
        relist_ = false;
        list_next_ = false;
    }
    std::string req = discovery_request(watch ? st_.resource_version : "", secs, via_->host_header());
    if (req.empty()) {  // the parser lets none through; were one stored, list afresh instead of sending it
        st_.resource_version.clear();
        list_next_ = true;
        failed("resource version refused");
        return;
    }
    http_ = HttpStream();
    lines_ = LineSplitter(kMaxWatchEventBytes);
    body_.clear();
    fail_.clear();
    watch_started_ms_ = uv_now(cp_.loop());
    req_ = TlsClient::start(cp_.loop(), cp_.tls().get(), via_->sa, via_->tls_name(), std::move(req), this,
                            static_cast<uint64_t>(s.health_timeout.count()), total);
}

bool Discovery::on_data(std::string_view bytes) {
    bool ok = http_.feed(bytes, [&](std::string_view body) {
        if (http_.status() != 200) {  // a Status body: keep its start for the error
            if (body_.size() < 512) body_.append(body.substr(0, 512 - body_.size()));
            return true;
        }
        return phase_ == Phase::listing ? on_list_body(body) : on_watch_line_feed(body);
    });
    if (publish_pending_) {  // what the events before any failure below said still counts
        publish_pending_ = false;
        publish();
        // Publishing may have removed the upstream this request goes to: upstream_down() then
        // aborted it and armed the next request; nothing of this one is left to judge (a stream
        // that broke on what it carried is still not watched again from where it broke).
        if (!req_) {
            if (!ok) list_next_ = true;
            return false;
        }
    }
    if (relist_) {  // an ERROR event with code 410 in the stream
        req_ = nullptr;
        relist("resource version too old");
        return false;
    }
    if (!ok) {
        req_ = nullptr;
        // A watch that broke on what it carried (an event past a bound, or malformed) would get
        // the same event again from the same resourceVersion: the retry lists instead.
        if (phase_ == Phase::watching) list_next_ = true;
        failed(fail_.empty() ? "bad response: " + http_.error() : fail_);
        return false;
    }
    if (http_.state() == HttpStream::State::done) {
        req_ = nullptr;
        on_end(true, "");
        return false;
    }
    return true;
}

bool Discovery::on_list_body(std::string_view bytes) {
    if (body_.size() + bytes.size() > kMaxSliceListBytes) {
        fail_ = fmt::format("list response larger than {} bytes", kMaxSliceListBytes);
        return false;
    }
    body_.append(bytes);
    return true;
}

bool Discovery::on_watch_line_feed(std::string_view bytes) {
    bool ok = lines_.feed(bytes, [&](std::string_view line) { return on_watch_line(line); });
    if (!ok && fail_.empty()) fail_ = "watch stream: " + lines_.error();
    return ok;
}

bool Discovery::on_watch_line(std::string_view line) {
    WatchEvent ev;
    std::string err;
    if (!parse_watch_event(line, ev, err)) {
        fail_ = "watch event: " + err;
        return false;
    }
    ++st_.events;
    switch (ev.type) {
    case WatchEventType::error:
        if (ev.code == 410) {
            relist_ = true;
            return false;
        }
        fail_ = fmt::format("watch error {}: {}", ev.code, ev.message.substr(0, 200));
        return false;
    case WatchEventType::bookmark:
        break;
    case WatchEventType::added:
    case WatchEventType::modified:
        // The list's bound holds for the watch too: a slice past it fails the stream (the set
        // so far stays), and the retries fail the same way until there are fewer.
        if (slices_.size() >= kMaxSlices && !slices_.count(ev.slice.name)) {
            fail_ = fmt::format("watch: more than {} endpoint slices", kMaxSlices);
            return false;
        }
        members_.drop_refused(ev.slice.endpoints, "slice", ev.slice.name);
        slices_[ev.slice.name] = std::move(ev.slice);
        publish_pending_ = true;
        break;
    case WatchEventType::deleted:
        slices_.erase(ev.slice.name);
        members_.forget_refused(slices_);
        publish_pending_ = true;
        break;
    }
    if (!ev.resource_version.empty()) st_.resource_version = ev.resource_version;
    members_.discovery_confirmed();  // the watch is live: the snapshot's set is current
    return true;
}

void Discovery::on_end(bool clean, const std::string& why) {
    req_ = nullptr;
    if (closed_) return;
    if (relist_) {
        relist("resource version too old");
        return;
    }
    if (!fail_.empty()) {
        failed(fail_);
        return;
    }
    if (!clean || (http_.state() != HttpStream::State::done && !http_.eof())) {
        failed(!why.empty() ? why : http_.state() == HttpStream::State::head ? "connection closed before a response"
                                                                             : "response truncated: " + http_.error());
        return;
    }
    const int code = http_.status();
    if (code == 410) {
        relist("HTTP 410");
        return;
    }
    if (code != 200) {
        std::string body = body_;
        std::replace_if(body.begin(), body.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
        failed(fmt::format("HTTP {}: {}", code, body.substr(0, 200)), code == 403);
        return;
    }
    if (phase_ == Phase::listing) {
        SliceList list;
        std::string err;
        if (!parse_slice_list(body_, list, err)) {
            failed("list: " + err);
            return;
        }
        body_.clear();
        body_.shrink_to_fit();
        ++st_.lists;
        slices_.clear();
        for (auto& s : list.items) {
            members_.drop_refused(s.endpoints, "slice", s.name);
            slices_[s.name] = std::move(s);
        }
        members_.forget_refused(slices_);  // the list names every slice there is
        st_.resource_version = list.resource_version;
        backoff_ms_ = 0;
        forbidden_logged_ = false;
        logged_error_.clear();
        publish();
        members_.discovery_confirmed();
        log::info("discovery: listed endpoint slices", {{"via", st_.via}, {"resource_version", st_.resource_version},
                                                        {"slices", static_cast<uint64_t>(slices_.size())},
                                                        {"endpoints", st_.endpoints}});
        phase_ = Phase::idle;
        arm(0, "watching");
        return;
    }
    // The watch ended as asked (timeoutSeconds) or the apiserver closed it: watch again from where
    // it got to. One that ended at once backs off, so a server that closes every watch is not hammered.
    phase_ = Phase::idle;
    if (uv_now(cp_.loop()) - watch_started_ms_ < kBackoffMinMs) {
        failed("the watch ended at once");
        return;
    }
    backoff_ms_ = 0;
    arm(0, "watching");
}

void Discovery::relist(const char* why) {
    ++st_.relists;
    phase_ = Phase::idle;
    relist_ = true;
    log::info("discovery: resource version too old; listing again",
              {{"via", st_.via}, {"resource_version", st_.resource_version}, {"reason", why}});
    arm(0, "listing");
}

void Discovery::failed(const std::string& why, bool forbidden) {
    ++st_.errors;
    st_.last_error = why;
    phase_ = Phase::idle;
    backoff_ms_ = backoff_ms_ == 0 ? kBackoffMinMs : std::min(backoff_ms_ * 2, kBackoffMaxMs);
    // x [0.5, 1.5): nodes that lost the same apiserver do not all come back at once.
    uint64_t wait = backoff_ms_ / 2 + random_below(backoff_ms_);
    if (forbidden) {
        if (!forbidden_logged_)
            log::error("discovery: forbidden; apply packaging/kubernetes/kprism-discovery-rbac.yaml",
                       {{"via", st_.via}, {"error", why}, {"retry_in", format_duration(Duration{static_cast<int64_t>(wait)})}});
        forbidden_logged_ = true;
    } else if (why != logged_error_) {  // one line per kind of failure, not one per retry
        log::warn("discovery: request failed; retrying",
                  {{"via", st_.via}, {"error", why}, {"retry_in", format_duration(Duration{static_cast<int64_t>(wait)})}});
        logged_error_ = why;
    } else {
        KPRISM_DEBUG("discovery: request failed again", {{"via", st_.via}, {"error", why}});
    }
    arm(wait, "backoff");
}

void Discovery::upstream_down(const Upstream& u) {
    if (!req_ || via_ != &u || closed_) return;
    req_->abort();
    req_ = nullptr;
    phase_ = Phase::idle;
    log::info("discovery: moving the request off an upstream that went down", {{"via", u.name}});
    arm(random_below(kBackoffMinMs), "waiting");
}

// The union of the slices' endpoints to the membership, each address once. An address's zone is
// the first valid one in slice-name order (kube-apiserver writes one slice for the service; a
// second naming the address with another zone is an operator's, and the order is stable); an
// ignored zone is logged once per address and reason, while no slice gives it a valid one.
void Discovery::publish() {
    std::vector<HostPort> all;
    std::unordered_set<std::string> seen;
    std::map<std::string, std::string> zones, refused;
    for (const auto& [name, s] : slices_) {
        for (const auto& e : s.endpoints)
            if (seen.insert(e.str()).second) all.push_back(e);
        for (const auto& [addr, zone] : s.zones) zones.emplace(addr, zone);
    }
    for (const auto& [name, s] : slices_)
        for (const auto& [addr, why] : s.zone_errors) {
            if (zones.count(addr) || !refused.emplace(addr, why).second) continue;
            auto it = zone_warned_.find(addr);
            if (it == zone_warned_.end() || it->second != why)
                log::warn("discovery: endpoint zone ignored; the endpoint is used without a zone",
                          {{"slice", name}, {"upstream", addr}, {"reason", why}});
        }
    zone_warned_ = std::move(refused);
    st_.endpoints = all.size();
    members_.apply_discovered(std::move(all), Source::discovered, zones);
}

}  // namespace kprism
