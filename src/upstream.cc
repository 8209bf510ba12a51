// Upstream bookkeeping: passive failure backoff with jitter, and the log line for each change.
#include "kprism/upstream.h"

#include <fmt/format.h>

#include "kprism/duration.h"
#include "kprism/log.h"
#include "kprism/random.h"

namespace kprism {

void UpstreamPool::add(const HostPort& addr) {
    auto u = std::make_unique<Upstream>();
    u->index = ups_.size();
    u->addr = addr;
    u->name = addr.str();
    if (addr.is_ip) {
        ip_to_sockaddr(addr.host, addr.port, u->sa);
        u->resolved = true;
    }
    ups_.push_back(std::move(u));
}

void UpstreamPool::connect_failed(Upstream& u, const char* reason, uint64_t now) {
    ++u.connect_failures;
    ++u.consecutive_failures;
    bool was_in_backoff = u.in_backoff(now);
    // Exponential backoff x2 with +-20 % jitter, so nodes do not retry a recovering apiserver at once.
    u.backoff_ms = u.backoff_ms == 0 ? kBackoffMinMs : std::min(u.backoff_ms * 2, kBackoffMaxMs);
    uint64_t wait = jitter(u.backoff_ms, 0.2);
    u.retry_at_ms = now + wait;
    if (!was_in_backoff)
        log::warn("upstream unavailable", {{"upstream", u.name},
                                           {"reason", reason},
                                           {"failures", u.consecutive_failures},
                                           {"retry_in", format_duration(Duration{static_cast<int64_t>(wait)})}});
}

void UpstreamPool::connect_succeeded(Upstream& u) {
    if (u.consecutive_failures > 0)
        log::info("upstream available", {{"upstream", u.name}, {"reason", "connect succeeded"},
                                         {"after_failures", u.consecutive_failures}});
    u.consecutive_failures = 0;
    u.backoff_ms = 0;
    u.retry_at_ms = 0;
}

size_t UpstreamPool::available_count(uint64_t now) const {
    size_t n = 0;
    for (const auto& u : ups_) n += u->available(now);
    return n;
}

}  // namespace kprism
