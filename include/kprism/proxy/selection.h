// SPDX-License-Identifier: Apache-2.0
// Upstream selection: which upstream a new connection (or a retry of it) goes to.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "kprism/config/config.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

// A policy ranks candidates that are all eligible; eligibility (readiness, zone, already tried)
// is decided by pick_upstream() so a new policy only chooses.
class Policy {
public:
    virtual ~Policy() = default;
    virtual Upstream* choose(Upstream* const* candidates, size_t n) = 0;
    virtual const char* name() const = 0;
};

std::unique_ptr<Policy> make_policy(PolicyKind kind);

// Upstreams by slot: bit i stands for upstream i.
using UpstreamSet = uint64_t;
static_assert(kMaxUpstreams <= 64, "UpstreamSet holds one bit per upstream slot");
// Bit i set = upstream i already tried by this connection.
using TriedSet = UpstreamSet;

// Zone and latency-tier eligibility, the one rule of pick_upstream() and of rebalancing
// (rebalancer.h): which upstreams new connections go to in normal operation. Bit i set: upstream i
// is up (Upstream::available), in the node's zone while an up upstream is there and, with
// `latency_tier`, in the nearest latency tier while an up upstream (in any zone) is.
// pick_upstream() asks without the tier: the latency policy applies it among the candidates not
// yet tried, and takes the lowest RTT among them when none is in it.
UpstreamSet eligible_upstreams(const UpstreamPool& pool, uint64_t now, bool latency_tier);

// Picks the next upstream for a connection:
//  1. an untried upstream that is up, preferring the eligible ones (eligible_upstreams(): the
//     node's zone while any up upstream is there);
//  2. else, if `fallback` (fail-open), an untried one that is not up: unknown before down, then
//     out of passive backoff before in it (earliest retry first) - a client fails only when every
//     upstream has failed it. Only one that has passed a check since kprism started, but for a
//     configured one while no upstream is up (failing open, bootstrap);
//  3. else nullptr.
Upstream* pick_upstream(UpstreamPool& pool, Policy& policy, TriedSet tried, uint64_t now, bool fallback = true);

}  // namespace kprism
