// SPDX-License-Identifier: Apache-2.0
// The discovered endpoints kept across restarts: the snapshot file's format, its checks when read
// at start, and its atomic write (temporary file, fsync, rename, fsync of the directory).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/address.h"

namespace kprism {

struct DiscoverySnapshot {
    int64_t written_unix = 0;
    std::string ca_sha256;            // of the CA file's bytes: a snapshot of another cluster is foreign
    std::vector<HostPort> endpoints;  // IP literals with their ports
    // The zone the slices gave an endpoint, by its HostPort::str(); only non-empty valid zones
    // (valid_zone). Version 3 only: versions 1 and 2 carry none.
    std::map<std::string, std::string> zones;
    // Versions 2 and 3: every endpoint passed a readiness check (membership.cc says when). Version
    // 1 lists every admitted endpoint, checked or not: read with `checked` false.
    bool checked = true;
};

// The format render_snapshot writes (3: endpoints as {"address", "zone"} objects); versions 1 and
// 2 (endpoints as "ip:port" strings) are still read; any other version is refused.
constexpr int kSnapshotVersion = 3;

// A snapshot file is at most this large (32 endpoints take about 1.5 KiB).
constexpr size_t kMaxSnapshotBytes = 64 * 1024;
// Written this far in the future (a clock that was wrong then, or is now) it is not trusted.
constexpr int64_t kSnapshotFutureSkewS = 300;

std::string render_snapshot(const DiscoverySnapshot& s);
// The format alone: kind, version (1 to kSnapshotVersion; a newer one is refused as written by a
// newer kprism), types, at most kMaxDiscovered IP endpoints, each zone valid (valid_zone). False
// with `err`.
bool parse_snapshot(std::string_view text, DiscoverySnapshot& out, std::string& err);
// Reads and checks the file at start: its size, format, CA (`ca_sha256` of the current CA file;
// empty: unknown, then any differs) and age against `max_age_s` at `now_unix`. False with the one
// reason the warning says ("cannot read: ...", "too old: ...", ...).
bool load_snapshot(const std::string& path, const std::string& ca_sha256, int64_t max_age_s, int64_t now_unix,
                   DiscoverySnapshot& out, std::string& reason);
// Writes `text` to `path` so that a crash at any moment leaves either the old file or the new one:
// `path`.tmp in the same directory, fsync, rename over `path`, fsync of the directory. Blocking:
// run it off the event loop. False with `err`.
bool write_file_atomic(const std::string& path, std::string_view text, std::string& err);
// Hex SHA-256 of a file's bytes; empty if it cannot be read.
std::string file_sha256_hex(const std::string& path);

}  // namespace kprism
