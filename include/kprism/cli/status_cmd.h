// SPDX-License-Identifier: Apache-2.0
// `kprism status`: asks a running kprism's admin endpoint for /status and prints a table; and the
// pieces `kprism reload` (reload_cmd.h) shares with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/config/config.h"
#include "kprism/admin/status.h"

namespace kprism {

// Exit status: 0 some upstream is up, 1 none is, 2 the admin endpoint could not be reached or
// answered something else than a /status document (or the command line is invalid).
constexpr int kStatusUp = 0, kStatusNoneUp = 1, kStatusError = 2;
int status_command(const CommandLine& cl);

// The table `kprism status` prints: a summary line, then one row per upstream under
// UPSTREAM ZONE STATE "LAST RESULT" RTT CONNS SINCE ERROR. `color`: ANSI colours for the state.
std::string render_status_table(const StatusDoc& d, int64_t now_unix, bool color);
// Its line about the client certificate: "client certificate CN=...: expires in 300d (...)", or
// ": rejected by every apiserver, expired 2h ago (...)". Every string is flattened and bounded.
std::string render_credentials_line(const StatusCredentials& c, bool color);

// An upstream's error as the ERROR column shows it: one line, whitespace runs collapsed, the tags
// of an HTML page (a TLS front end's "400 Bad Request" page) dropped, and cut to at most `max`
// characters with "..." at the end. /status and the logs keep the full text.
constexpr size_t kErrorCellMax = 64;
std::string error_cell(std::string_view error, size_t max = kErrorCellMax);
// Any other text from the admin port as the terminal gets it: one line, every control character
// (C0, DEL, C1 such as CSI U+009B), the bidirectional overrides and the line separators one
// space, bytes that are not UTF-8 '?', cut to at most `max` characters with "...". Whatever
// holds the admin port cannot send escape sequences or forge rows through it.
std::string terminal_cell(std::string_view text, size_t max);

// GET `path` from host:port (an IP address) over a plain TCP connection, everything within
// `timeout_ms`; the response is read with HttpResponseParser (whole body, at most
// kMaxStatusResponse bytes). Returns false with *error ("connection refused", "timed out after
// 3s", "not an HTTP response", ...).
constexpr size_t kMaxStatusResponse = 4 * 1024 * 1024 + 64 * 1024;  // kMaxJsonBytes and the head
bool http_fetch(const std::string& host, uint16_t port, const std::string& path, int timeout_ms, int& status,
                std::string& body, std::string& error);

// Where the daemon's admin endpoint is. `where` is "127.0.0.1:7446" for messages.
struct AdminTarget {
    std::string host;
    uint16_t port = 0;
    std::string where;
};
// health.bind_address (a wildcard one is reached over loopback) and health.port.
AdminTarget admin_target(const Config& cfg);
// For `status` and `reload`: the address the daemon published in its runtime directory
// (runtime_dir.h), unless --health-bind-address or --health-port is given; else the one `cfg`
// (the --config file and flags, nullptr when it did not load) names. nullopt: neither.
std::optional<AdminTarget> locate_admin(const CommandLine& cl, const Config* cfg);
// The same, loading the --config file and flags first; when neither gives an address, `errors`
// says why the file did not load.
std::optional<AdminTarget> locate_admin(const CommandLine& cl, std::vector<std::string>& errors);

// GET /status and parse it. unreachable: no HTTP answer (`error` says why); unexpected: an answer
// that is not a /status document (another status than 200, or malformed).
enum class FetchStatus { ok, unreachable, unexpected };
FetchStatus fetch_status(const AdminTarget& t, int timeout_ms, StatusDoc& doc, std::string& error);

}  // namespace kprism
