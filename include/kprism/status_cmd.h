// `kprism status`: asks a running kprism's admin endpoint for /status and prints a table.
#pragma once

#include <cstdint>
#include <string>

#include "kprism/config.h"
#include "kprism/status.h"

namespace kprism {

// Exit status: 0 some upstream is up, 1 none is, 2 the admin endpoint could not be reached or
// answered something else than a /status document (or the command line is invalid).
constexpr int kStatusUp = 0, kStatusNoneUp = 1, kStatusError = 2;
int status_command(const CommandLine& cl);

// The table `kprism status` prints: a summary line, then one row per upstream under
// UPSTREAM ZONE STATE "LAST RESULT" RTT CONNS SINCE ERROR. `color`: ANSI colours for the state.
std::string render_status_table(const StatusDoc& d, int64_t now_unix, bool color);

// GET `path` from host:port (an IP address) over a plain TCP connection, everything within
// `timeout_ms`. Returns false with *error ("connection refused", "timed out after 3s", ...).
bool http_fetch(const std::string& host, uint16_t port, const std::string& path, int timeout_ms, int& status,
                std::string& body, std::string& error);

}  // namespace kprism
