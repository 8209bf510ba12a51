// SPDX-License-Identifier: Apache-2.0
// Discovery of the apiservers from the default/kubernetes EndpointSlices: list, then watch from
// the list's resourceVersion (bookmarks on, 410 Gone lists again), through an upstream that is up,
// with the kubelet's client certificate; errors back off from 1 s to 30 s with jitter. What it
// finds goes to Membership::apply_discovered(), which admits and removes upstreams.
#pragma once

#include <uv.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kprism/base/address.h"
#include "kprism/discovery/parse.h"
#include "kprism/upstreams/tls_client.h"

namespace kprism {

class ControlPlane;
class Membership;
struct Upstream;

// What /status and the metrics show of discovery.
struct DiscoveryStatus {
    bool enabled = false;
    const char* state = "off";  // off, waiting (no upstream up to ask), listing, watching, backoff
    std::string via;            // the upstream the request in flight goes to
    std::string resource_version;
    uint64_t endpoints = 0;  // in the slices, admitted by the rules (ready, IP, port)
    uint64_t lists = 0, relists = 0, events = 0, errors = 0;
    std::string last_error;
};

// The request head of discovery's list (`resource_version` empty) or of a watch from
// `resource_version` for `timeout_seconds`, to `host`. Empty, and nothing to send, when
// `resource_version` fails valid_resource_version(): a value from the network never reaches the
// request line unchecked.
std::string discovery_request(std::string_view resource_version, uint64_t timeout_seconds, std::string_view host);

// Owned by the Membership, made when discovery starts; it asks through `cp` (the loop, the
// configuration, the upstreams and the client certificate) and hands what it finds to `members`.
// Its timer and request are closed by close().
class Discovery final : private TlsClient::Handler {
public:
    Discovery(ControlPlane& cp, Membership& members);
    ~Discovery() override;
    Discovery(const Discovery&) = delete;
    Discovery& operator=(const Discovery&) = delete;

    void start();
    void close();
    // An upstream went down: a watch through it is moved to one that is up (an apiserver without
    // etcd keeps a watch open and silent).
    void upstream_down(const Upstream& u);
    const DiscoveryStatus& status() const { return st_; }

    static constexpr uint64_t kBackoffMinMs = 1000;
    static constexpr uint64_t kBackoffMaxMs = 30000;
    static constexpr uint64_t kWaitMs = 1000;          // no upstream up: look again this often
    static constexpr uint64_t kListTimeoutMs = 30000;  // the whole list request
    // Watches ask for timeoutSeconds in [300, 600) (kube-apiserver's clients pick theirs the same
    // way), and give up this long after it.
    static constexpr uint64_t kWatchGraceMs = 30000;

private:
    enum class Phase { idle, listing, watching };
    void begin();
    void send(bool watch);
    bool on_data(std::string_view bytes) override;
    void on_end(bool clean, const std::string& why) override;
    bool on_list_body(std::string_view bytes);
    bool on_watch_line_feed(std::string_view bytes);
    bool on_watch_line(std::string_view line);
    void failed(const std::string& why, bool forbidden = false);
    void relist(const char* why);
    void publish();
    void arm(uint64_t ms, const char* state);
    static void on_timer(uv_timer_t* t);

    ControlPlane& cp_;
    Membership& members_;
    DiscoveryStatus st_;
    uv_timer_t timer_{};
    bool started_ = false;
    bool closed_ = false;
    Phase phase_ = Phase::idle;
    TlsClient* req_ = nullptr;
    const Upstream* via_ = nullptr;
    HttpStream http_;
    LineSplitter lines_;
    std::string body_;  // the list response, at most kMaxSliceListBytes
    std::string fail_;  // why a response was refused, set while parsing it
    bool relist_ = false;  // the watch said 410: list again at once
    // Watch events of the bytes being read changed the slices: published once when the read is
    // done, so that a burst of events is one membership change, not one per event.
    bool publish_pending_ = false;
    bool list_next_ = false;  // the watch broke on its content: the retry lists
    uint64_t watch_started_ms_ = 0;
    uint64_t backoff_ms_ = 0;
    bool forbidden_logged_ = false;
    std::string logged_error_;  // the failure last logged; the same one again is not
    std::map<std::string, DiscoveredSlice> slices_;  // by slice name
    // The endpoints whose zone was ignored, by address: the reason last logged (one line per
    // change, not one per event). At most as many as the slices' endpoints.
    std::map<std::string, std::string> zone_warned_;
};

}  // namespace kprism
