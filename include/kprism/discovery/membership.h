// SPDX-License-Identifier: Apache-2.0
// Membership of discovered upstreams: admitting what discovery finds (checked before use),
// draining those that left (never the configured floor, never leaving nothing up; the addresses
// a hostname endpoint lost leave the same way), the address rules on discovered addresses, the
// snapshot read at start and written after each change.
#pragma once

#include <uv.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kprism/base/address.h"
#include "kprism/discovery/parse.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

class ControlPlane;
class Discovery;
struct DiscoveryStatus;

// The discovery snapshot file as /status shows it.
struct SnapshotStatus {
    const char* state = "disabled";  // disabled, none (no file yet), loaded, ignored, written, failed
    std::string path;
    std::string detail;        // why it was ignored, or why the write failed
    int64_t written_unix = 0;  // of the file kprism last read or wrote; 0: none
};

// Owned by the ControlPlane, whose upstreams it admits (ControlPlane::start_checker) and removes
// (ControlPlane::remove_upstream) and which tells it of their health; it reaches the loop, the
// configuration and the listeners through the ControlPlane too. It owns the Discovery that feeds
// it, made by start() (only when discovery is on) and closed by close(). A snapshot write in
// flight (a threadpool job) keeps the loop running until its callback, so it ends before this is
// freed.
class Membership {
public:
    explicit Membership(ControlPlane& cp);
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;

    // Reads the snapshot (its members are added as source=snapshot), then starts discovery.
    void start();
    // Closes discovery; no snapshot write starts after this. Idempotent.
    void close();

    // Discovery's set of endpoints (`src`: discovered, or snapshot at start): new ones are added
    // and checked before use, those that left drain unless no upstream that stays is up; the
    // configured ones are the floor. An empty set changes nothing; more than kMaxDiscovered keep
    // the known ones first. `zones` (by HostPort::str(), valid_zone() checked) become each
    // upstream's discovered_zone, in force unless a configured zone is set; a change is logged.
    void apply_discovered(std::vector<HostPort> endpoints, Source src,
                          const std::map<std::string, std::string>& zones = {});
    // The API just confirmed the discovered set (a list, a watch event or bookmark): the snapshot
    // is written again if it is older than kSnapshotRefreshS, so that its age says how long ago
    // the API last spoke, not how long the membership has been stable.
    void discovery_confirmed() { write_snapshot(); }
    static constexpr int64_t kSnapshotRefreshS = 3600;
    // Drops from `endpoints` every address the rules for discovered addresses refuse
    // (address_rules.h, discovery.allowed_cidrs), with one warning per address and `origin`
    // ("slice" or "snapshot", `name`) while it keeps being named: `endpoints` is all that `name`
    // names now, and an address it no longer names is forgotten (warned again if named again).
    void drop_refused(std::vector<HostPort>& endpoints, const char* origin, const std::string& name);
    // The slices there are now (after a deletion, or a list): what the others named is forgotten.
    void forget_refused(const std::map<std::string, DiscoveredSlice>& slices);

    // What the ControlPlane tells it. `u` passed a check for the first time in this process: a
    // member goes into the snapshot now.
    void passed_first_check(const Upstream& u);
    // `u` went down, or is being removed: a discovery request through it moves to one that is up.
    void upstream_down(const Upstream& u);
    // Removes the upstreams that left the slices, but only while some upstream that stays is up
    // (asked again whenever one comes up).
    void settle_departures();
    // An address a hostname endpoint no longer resolves to leaves the same way: removed (drained)
    // once an upstream that stays is up. keep(): it resolves to it again before that.
    void depart(const Upstream& u);
    void keep(Upstream& u);
    // `u`'s place among those waiting to leave, oldest first (0 the oldest), or -1 if it is not.
    long departing_place(const Upstream& u) const;
    // `u` is in the admitted set (the slices, or the snapshot read at start). Never with
    // discovery off.
    bool in_discovered(const Upstream& u) const;

    // nullptr when discovery is off.
    const DiscoveryStatus* discovery() const;
    const SnapshotStatus& snapshot() const { return snapshot_; }

private:
    Upstream* find_live(const HostPort& addr);
    void set_discovered_zone(Upstream& u, const std::string& zone);
    void write_snapshot();
    static void on_snapshot_work(uv_work_t* w);
    static void on_snapshot_done(uv_work_t* w, int status);

    ControlPlane& cp_;
    std::unique_ptr<Discovery> discovery_;
    bool closed_ = false;
    std::vector<std::string> discovered_;  // the admitted set, canonical "ip:port", sorted
    std::vector<std::string> departing_;   // left the set, waiting for an upstream that stays to be up
    bool empty_warned_ = false;
    // "origin name" -> the refused addresses it named last, each warned about once. As many keys
    // as live slices (bounded by discovery) and the snapshot.
    std::unordered_map<std::string, std::unordered_set<std::string>> refused_warned_;
    bool limit_warned_ = false;
    std::string ca_sha256_;
    SnapshotStatus snapshot_;
    std::vector<std::string> snapshot_set_;  // what the file holds (as far as kprism knows), each "ip:port zone"
    bool api_set_ = false;  // discovered_ came from the API (not only from the snapshot)
    uv_work_t snapshot_work_{};
    bool snapshot_writing_ = false;
    bool snapshot_again_ = false;
    // The write in flight (the threadpool reads only these three).
    std::string snapshot_path_, snapshot_text_, snapshot_error_;
    bool snapshot_ok_ = false;
    int64_t snapshot_written_pending_ = 0;
    std::vector<std::string> snapshot_pending_set_;
};

}  // namespace kprism
