// Upstream selection: which upstream a new connection (or a retry of it) goes to.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "kprism/upstream.h"

namespace kprism {

// A policy chooses among candidates that are all eligible; eligibility (readiness, backoff,
// already tried) is decided by pick_upstream() so a new policy only ranks.
class Policy {
public:
    virtual ~Policy() = default;
    virtual Upstream* choose(Upstream* const* candidates, size_t n) = 0;
    virtual const char* name() const = 0;
};

std::unique_ptr<Policy> make_policy(std::string_view name);  // "random", "least-connections"; nullptr if unknown

// Bit i set = upstream i already tried by this connection. Endpoint lists hold at most 64.
using TriedSet = uint64_t;
constexpr size_t kMaxUpstreams = 64;

// Picks the next upstream for a connection: an available, untried one chosen by `policy`; when
// none is available, the untried one whose backoff ends first (a client fails only when every
// upstream has failed it). Returns nullptr when every resolved upstream has been tried.
Upstream* pick_upstream(UpstreamPool& pool, Policy& policy, TriedSet tried, uint64_t now);

}  // namespace kprism
