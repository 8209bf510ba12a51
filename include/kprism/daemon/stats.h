// SPDX-License-Identifier: Apache-2.0
// The daemon's counters (Stats): what /metrics, /status and the SIGUSR1 log line report of it.
//
// Plain values, owned by the Server (a member); the ControlPlane and the Rebalancer hold a
// reference to it for the Server's lifetime, and the admin views take a copy.
#pragma once

#include <cstdint>
#include <string>

namespace kprism {

struct Stats {
    uint64_t accepted = 0;
    uint64_t resumed = 0;         // handed over by the previous process (handoff/fd_store.cc)
    uint64_t rejected = 0;        // over max_connections
    uint64_t accept_errors = 0;   // EMFILE and friends
    uint64_t client_failures = 0; // every upstream failed a client
    uint64_t connect_failures = 0;
    uint64_t replayed = 0;         // moved to another upstream before any answer
    uint64_t closed_for_down = 0;  // established connections closed because their upstream went down
    uint64_t rebalance_scheduled = 0;  // connections chosen by rebalancing to move
    uint64_t rebalanced = 0;           // of those, closed (the rest recovered or closed first)
    uint64_t fail_open_episodes = 0;
    uint64_t reloads_ok = 0, reloads_failed = 0;
    // The last finished reload attempt (SIGHUP), for /status and `kprism reload`: generation counts
    // finished attempts (reloads_ok + reloads_failed); what it changed or why it failed, and when.
    uint64_t reload_generation = 0;
    bool reload_last_ok = false;
    std::string reload_last_changes;  // "none" or "endpoint_added=... listener_removed=..."
    std::string reload_last_error;    // every error line, joined with "; "
    int64_t reload_last_unix = 0;     // 0: no reload yet
};

}  // namespace kprism
