// SPDX-License-Identifier: Apache-2.0
// `kprism status`: one GET /status from the admin endpoint (a blocking socket with a deadline: it
// is a CLI; the response read by HttpResponseParser), printed as a table; the exit status says
// whether some upstream is up.
#include "kprism/cli/status_cmd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "kprism/base/address.h"
#include "kprism/base/duration.h"
#include "kprism/upstreams/http_response.h"
#include "kprism/daemon/runtime_dir.h"

namespace kprism {

namespace {

using Clock = std::chrono::steady_clock;

std::string sys_error(int err) { return uv_strerror(uv_translate_sys_error(err)); }

int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout (errno = ETIMEDOUT).
bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        int left = ms_left(deadline);
        if (left == 0) {
            errno = ETIMEDOUT;
            return false;
        }
        pollfd p{fd, events, 0};
        int r = ::poll(&p, 1, left);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

const char* colour_of(std::string_view state) {
    if (state == "up") return "\x1b[32m";
    if (state == "down") return "\x1b[31m";
    return "\x1b[33m";
}

// "3d", "5h", "12m", "40s": how far off a certificate's end is, at a glance.
std::string roughly(int64_t seconds) {
    uint64_t a = seconds < 0 ? 0 - static_cast<uint64_t>(seconds) : static_cast<uint64_t>(seconds);  // INT64_MIN too
    if (a >= 2 * 86400) return fmt::format("{}d", a / 86400);
    if (a >= 2 * 3600) return fmt::format("{}h", a / 3600);
    if (a >= 2 * 60) return fmt::format("{}m", a / 60);
    return fmt::format("{}s", a);
}

std::string utc(int64_t unix_s) {
    auto t = static_cast<time_t>(unix_s);
    struct tm tm {};
    char buf[32] = "?";
    if (gmtime_r(&t, &tm)) strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace

std::string render_credentials_line(const StatusCredentials& c, bool color) {
    std::string subject = error_cell(c.subject, kErrorCellMax);
    if (c.not_after_unix == 0 && subject.empty())
        return fmt::format("client certificate: none loaded ({})\n", error_cell(c.client_cert, kErrorCellMax));
    std::string when;
    if (c.has_remaining)
        when = c.remaining_seconds > 0 ? fmt::format("expires in {}", roughly(c.remaining_seconds))
                                       : fmt::format("expired {} ago", roughly(c.remaining_seconds));
    if (c.not_after_unix != 0) when += fmt::format("{}({})", when.empty() ? "" : " ", utc(c.not_after_unix));
    std::string state;
    if (c.state == "rejected") state = color ? "\x1b[31mrejected by every apiserver\x1b[0m" : "rejected by every apiserver";
    else if (c.state != "ok") state = error_cell(c.state, 32);  // "unknown", or what a newer kprism says
    std::string out = fmt::format("client certificate {}", subject.empty() ? "-" : subject);
    if (!state.empty()) out += ": " + state;
    if (!when.empty()) out += (state.empty() ? ": " : ", ") + when;
    return out + "\n";
}

bool http_fetch(const std::string& host, uint16_t port, const std::string& path, int timeout_ms, int& status,
                std::string& body, std::string& error) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::string timed_out = fmt::format("timed out after {}", format_duration(Duration{timeout_ms}));
    sockaddr_storage ss{};
    if (!ip_to_sockaddr(host, port, ss)) {
        error = fmt::format("'{}' is not an IP address", host);
        return false;
    }
    Fd s;
    s.fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s.fd < 0) {
        error = sys_error(errno);
        return false;
    }
    auto* sa = as_sockaddr(ss);
    if (::connect(s.fd, sa, sockaddr_len(sa)) != 0) {
        if (errno != EINPROGRESS) {
            error = sys_error(errno);
            return false;
        }
        if (!wait_for(s.fd, POLLOUT, deadline)) {
            error = errno == ETIMEDOUT ? timed_out : sys_error(errno);
            return false;
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (soerr != 0) {
            error = sys_error(soerr);
            return false;
        }
    }
    std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kprism-status\r\nConnection: close\r\n\r\n",
                                  path, sockaddr_str(sa));
    for (size_t sent = 0; sent < req.size();) {
        ssize_t n = ::send(s.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_for(s.fd, POLLOUT, deadline)) return error = timed_out, false;
        } else {
            error = sys_error(errno);
            return false;
        }
    }
    HttpResponseParser parser(kMaxStatusResponse, 0, HttpResponseParser::Body::whole);
    HttpResponseParser::State st = HttpResponseParser::State::need_more;
    char buf[16384];
    while (st == HttpResponseParser::State::need_more) {
        ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
        if (n > 0) {
            st = parser.feed(buf, static_cast<size_t>(n));
        } else if (n == 0) {
            st = parser.eof();
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_for(s.fd, POLLIN, deadline)) return error = errno == ETIMEDOUT ? timed_out : sys_error(errno), false;
        } else {
            error = sys_error(errno);
            return false;
        }
    }
    if (st == HttpResponseParser::State::error) {
        error = terminal_cell(parser.error(), 200);  // it may quote what the port sent
        return false;
    }
    status = parser.status();
    body = parser.body();
    return true;
}

namespace {

// The length of the UTF-8 sequence at s[i] and the code point it spells; 0 if it is not one
// (a stray continuation byte, a truncated or overlong sequence, a surrogate, beyond U+10FFFF).
size_t utf8_at(std::string_view s, size_t i, uint32_t& cp) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (b(k) & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

// Code points a terminal acts on or that reorder or break the line: shown as a space.
bool blank_code_point(uint32_t cp) {
    return cp <= ' ' || (cp >= 0x7f && cp <= 0x9f) || cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0x061c || cp == 0xfeff;
}

// One printable line: every run of blanks (above) one space, none at either end, invalid UTF-8
// '?'; `in_tag` drops the tags of an HTML page.
std::string flatten(std::string_view text, bool html) {
    std::string flat;
    bool in_tag = false;
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        size_t n = utf8_at(text, i, cp);
        if (html && cp == '<') in_tag = true;
        const bool blank = n != 0 && (in_tag || blank_code_point(cp));
        if (html && cp == '>') in_tag = false;
        if (n == 0) flat += '?';
        else if (!blank) flat.append(text.substr(i, n));
        else if (!flat.empty() && flat.back() != ' ') flat += ' ';
        i += n == 0 ? 1 : n;
    }
    while (!flat.empty() && flat.back() == ' ') flat.pop_back();
    return flat;
}

// Cut by characters (UTF-8 continuation bytes do not count), never inside one, at the end of a
// word when one ends shortly before, with "..." at the end.
std::string cut_cell(std::string flat, size_t max) {
    size_t chars = 0, cut = std::string::npos;
    size_t keep = max > 3 ? max - 3 : 0;
    for (size_t i = 0; i < flat.size(); ++i) {
        if ((static_cast<unsigned char>(flat[i]) & 0xc0) == 0x80) continue;
        if (chars == keep) cut = i;
        if (++chars > max) break;
    }
    if (chars <= max) return flat;
    if (size_t space = flat.rfind(' ', cut); space != std::string::npos && space > 0 && cut - space <= 16) cut = space;
    flat.resize(cut);
    while (!flat.empty() && flat.back() == ' ') flat.pop_back();
    return flat + "...";
}

}  // namespace

std::string error_cell(std::string_view error, size_t max) {
    auto lower = [](unsigned char c) { return static_cast<char>(std::tolower(c)); };
    std::string low(error.size(), ' ');
    std::transform(error.begin(), error.end(), low.begin(), lower);
    bool html = false;
    for (const char* tag : {"<html", "<!doctype", "<head", "<body", "<title", "<center", "<h1", "<p>"})
        html = html || low.find(tag) != std::string::npos;
    return cut_cell(flatten(error, html), max);
}

std::string terminal_cell(std::string_view text, size_t max) { return cut_cell(flatten(text, false), max); }

std::string render_status_table(const StatusDoc& d, int64_t now_unix, bool color) {
    size_t up = 0;
    for (const auto& u : d.upstreams) up += u.state == "up";
    std::string out = fmt::format("kprism {}: {} of {} upstreams up, {} connection{}{}{}{}\n", terminal_cell(d.version, 64), up,
                                  d.upstreams.size(), d.connections_active, d.connections_active == 1 ? "" : "s",
                                  d.fail_open ? ", no upstream ready" : "",
                                  d.condition == "no-etcd-quorum" ? ", no etcd quorum" : "",
                                  d.draining ? ", shutting down" : "");
    if (d.has_credentials) out += render_credentials_line(d.credentials, color);
    if (d.discovery.enabled) {
        const StatusDiscovery& di = d.discovery;
        std::string snap = error_cell(di.snapshot_state, 16);
        if (di.has_snapshot_age)
            snap += fmt::format(", {} old", format_duration(Duration{std::max<int64_t>(0, di.snapshot_age_seconds) * 1000}));
        out += fmt::format("discovery: {}{}, {} endpoint{} in the slices, snapshot {}{}\n", error_cell(di.state, 16),
                           di.via.empty() ? "" : " via " + error_cell(di.via, 64), di.endpoints,
                           di.endpoints == 1 ? "" : "s", snap,
                           di.last_error.empty() ? "" : "; last error: " + error_cell(di.last_error, 120));
    }
    std::vector<std::vector<std::string>> rows = {{"UPSTREAM", "ZONE", "SOURCE", "STATE", "LAST RESULT", "CHECKS", "RTT", "CONNS", "SINCE", "ERROR"}};
    for (const auto& u : d.upstreams) {
        std::string since = "-";
        if (u.last_change_unix > 0)
            since = format_duration(Duration{std::max<int64_t>(0, now_unix - u.last_change_unix) * 1000});
        std::string err = error_cell(u.last_error);
        // The failing checks, from a daemon-bounded list, made one printable cell here as well.
        std::string checks = u.failing_checks.empty() ? "-" : error_cell(u.failing_checks.str());
        rows.push_back({terminal_cell(u.address, 80), u.zone.empty() ? "-" : terminal_cell(u.zone, 64),
                        terminal_cell(u.source, 16), terminal_cell(u.state, 16),
                        u.last_result.empty() ? "-" : terminal_cell(u.last_result, 32),
                        checks, u.rtt_ms >= 0 ? fmt::format("{:.1f}ms", u.rtt_ms) : "-",
                        fmt::format("{}", u.active_connections), since, err});
    }
    // Widths in characters: a cell is valid UTF-8 by now, its continuation bytes take no column.
    auto columns = [](const std::string& cell) {
        return static_cast<size_t>(std::count_if(cell.begin(), cell.end(), [](char c) {
            return (static_cast<unsigned char>(c) & 0xc0) != 0x80;
        }));
    };
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], columns(r[i]));
    for (size_t n = 0; n < rows.size(); ++n) {
        std::string line;
        for (size_t i = 0; i < rows[n].size(); ++i) {
            const std::string& cell = rows[n][i];
            bool last = i + 1 == rows[n].size();
            if (color && n > 0 && i == 3) line += fmt::format("{}{}\x1b[0m", colour_of(cell), cell);
            else line += cell;
            if (!last) line += std::string(width[i] - columns(cell) + 2, ' ');
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out += line + "\n";
    }
    return out;
}

namespace {
AdminTarget target_of(std::string host, uint16_t port) {
    AdminTarget t;
    // The daemon listens there; a wildcard address is reached over loopback.
    t.host = std::move(host);
    if (t.host == "0.0.0.0") t.host = "127.0.0.1";
    if (t.host == "::" || t.host == "[::]") t.host = "::1";
    t.port = port;
    sockaddr_storage ss{};
    t.where = ip_to_sockaddr(t.host, t.port, ss) ? sockaddr_str(ss) : fmt::format("{}:{}", t.host, t.port);
    return t;
}
}  // namespace

AdminTarget admin_target(const Config& cfg) {
    return target_of(cfg.s.health_bind_address, static_cast<uint16_t>(cfg.s.health_port));
}

std::optional<AdminTarget> locate_admin(const CommandLine& cl, const Config* cfg) {
    bool explicit_address = false;
    for (const auto& [o, value] : cl.flags)
        explicit_address = explicit_address || std::string_view(o->key) == "health.port" ||
                           std::string_view(o->key) == "health.bind_address";
    HostPort published;
    if (auto line = runtime::published_admin_address(); line && !explicit_address &&
                                                        parse_host_port(*line, published, nullptr))
        return target_of(published.host, published.port);
    if (cfg) return admin_target(*cfg);
    if (explicit_address) {  // the file does not load, but the flags say where
        CommandLine flags_only = cl;
        flags_only.config_file.clear();
        Config c;
        std::vector<std::string> ignored;
        if (load_config(flags_only, c, ignored)) return admin_target(c);
    }
    return std::nullopt;
}

FetchStatus fetch_status(const AdminTarget& t, int timeout_ms, StatusDoc& doc, std::string& error) {
    int code = 0;
    std::string body;
    error.clear();
    if (!http_fetch(t.host, t.port, "/status", timeout_ms, code, body, error)) return FetchStatus::unreachable;
    if (code != 200) {
        error = fmt::format("HTTP {}", code);
        return FetchStatus::unexpected;
    }
    if (!parse_status_json(body, doc, error)) {
        // The parser's message quotes what it read: bytes from the admin port, for the terminal.
        error = error.empty() ? "malformed /status document" : terminal_cell(error, 200);
        return FetchStatus::unexpected;
    }
    return FetchStatus::ok;
}

std::optional<AdminTarget> locate_admin(const CommandLine& cl, std::vector<std::string>& errors) {
    Config cfg;
    bool loaded = load_config(cl, cfg, errors);
    return locate_admin(cl, loaded ? &cfg : nullptr);
}

int status_command(const CommandLine& cl) {
    std::vector<std::string> errors;
    std::optional<AdminTarget> where = locate_admin(cl, errors);
    if (!where) {
        for (const auto& e : errors) fmt::print(stderr, "kprism status: {}\n", e);
        return kStatusError;
    }
    const AdminTarget& t = *where;
    StatusDoc doc;
    std::string err;
    switch (fetch_status(t, 3000, doc, err)) {
    case FetchStatus::ok: break;
    case FetchStatus::unreachable:
        fmt::print(stderr, "kprism status: cannot reach the admin endpoint at {}: {}\n", t.where, err);
        return kStatusError;
    case FetchStatus::unexpected:
        fmt::print(stderr, "kprism status: unexpected answer from the admin endpoint at {}: {}\n", t.where, err);
        return kStatusError;
    }
    const char* no_color = std::getenv("NO_COLOR");
    bool color = isatty(STDOUT_FILENO) && !(no_color && *no_color);
    fmt::print("{}", render_status_table(doc, static_cast<int64_t>(std::time(nullptr)), color));
    for (const auto& u : doc.upstreams)
        if (u.state == "up") return kStatusUp;
    return kStatusNoneUp;
}

}  // namespace kprism
