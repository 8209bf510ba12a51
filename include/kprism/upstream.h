// Upstream (kube-apiserver) state: address, availability, passive failure backoff and counters.
#pragma once

#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kprism/address.h"

namespace kprism {

// Why an upstream may not receive new connections. Health checking (readiness) adds its own
// verdict in `healthy`; passive detection (failed client connects) adds a backoff window.
struct Upstream {
    size_t index = 0;
    HostPort addr;
    std::string name;  // addr.str(), for logs

    // Address to connect to; for hostnames filled by the resolver.
    sockaddr_storage sa{};
    bool resolved = false;
    uv_getaddrinfo_t resolve_req{};
    bool resolving = false;
    bool resolve_failed_logged = false;

    // Passive detection: consecutive failed connects put the upstream in backoff until retry_at.
    uint32_t consecutive_failures = 0;
    uint64_t retry_at_ms = 0;  // loop time (uv_now); 0 = no backoff
    uint64_t backoff_ms = 0;
    bool healthy = true;  // set by the health checker; true while no checker runs

    // Counters.
    uint32_t active = 0;
    uint64_t total = 0;
    uint64_t connect_failures = 0;
    uint64_t bytes_to_upstream = 0;
    uint64_t bytes_from_upstream = 0;

    bool in_backoff(uint64_t now) const { return retry_at_ms != 0 && now < retry_at_ms; }
    // May receive new connections in normal operation.
    bool available(uint64_t now) const { return resolved && healthy && !in_backoff(now); }
};

class UpstreamPool {
public:
    UpstreamPool() = default;
    void add(const HostPort& addr);
    size_t size() const { return ups_.size(); }
    Upstream& operator[](size_t i) { return *ups_[i]; }
    const Upstream& operator[](size_t i) const { return *ups_[i]; }

    // Passive signals from the data path. `reason` is logged on a state change only.
    void connect_failed(Upstream& u, const char* reason, uint64_t now);
    void connect_succeeded(Upstream& u);

    size_t available_count(uint64_t now) const;

    static constexpr uint64_t kBackoffMinMs = 1000;
    static constexpr uint64_t kBackoffMaxMs = 30000;

private:
    std::vector<std::unique_ptr<Upstream>> ups_;
};

}  // namespace kprism
