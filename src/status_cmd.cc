// `kprism status`: one GET /status from the admin endpoint (a blocking socket with a deadline: it
// is a CLI), printed as a table; the exit status says whether some upstream is up.
#include "kprism/status_cmd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "kprism/address.h"
#include "kprism/duration.h"

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

}  // namespace

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
    auto* sa = reinterpret_cast<const sockaddr*>(&ss);
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
    std::string resp;
    char buf[16384];
    for (;;) {
        ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
        if (n > 0) {
            resp.append(buf, static_cast<size_t>(n));
            if (resp.size() > 8 * 1024 * 1024) return error = "response too large", false;
        } else if (n == 0) {
            break;
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_for(s.fd, POLLIN, deadline)) return error = errno == ETIMEDOUT ? timed_out : sys_error(errno), false;
        } else {
            error = sys_error(errno);
            return false;
        }
    }
    size_t head_end = resp.find("\r\n\r\n");
    if (resp.compare(0, 7, "HTTP/1.") != 0 || resp.size() < 12 || head_end == std::string::npos) {
        error = resp.empty() ? "connection closed without a response" : "not an HTTP response";
        return false;
    }
    status = std::atoi(resp.c_str() + 9);
    body = resp.substr(head_end + 4);
    return true;
}

std::string render_status_table(const StatusDoc& d, int64_t now_unix, bool color) {
    size_t up = 0;
    for (const auto& u : d.upstreams) up += u.state == "up";
    std::string out = fmt::format("kprism {}: {} of {} upstreams up, {} connection{}{}{}\n", d.version, up,
                                  d.upstreams.size(), d.connections_active, d.connections_active == 1 ? "" : "s",
                                  d.fail_open ? ", no upstream ready" : "", d.draining ? ", shutting down" : "");
    std::vector<std::vector<std::string>> rows = {{"UPSTREAM", "ZONE", "STATE", "LAST RESULT", "RTT", "CONNS", "SINCE", "ERROR"}};
    for (const auto& u : d.upstreams) {
        std::string since = "-";
        if (u.last_change_unix > 0)
            since = format_duration(Duration{std::max<int64_t>(0, now_unix - u.last_change_unix) * 1000});
        std::string err = u.last_error;
        for (char& c : err)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
        rows.push_back({u.address, u.zone.empty() ? "-" : u.zone, u.state, u.last_result.empty() ? "-" : u.last_result,
                        u.rtt_ms >= 0 ? fmt::format("{:.1f}ms", u.rtt_ms) : "-",
                        fmt::format("{}", u.active_connections), since, err});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    for (size_t n = 0; n < rows.size(); ++n) {
        std::string line;
        for (size_t i = 0; i < rows[n].size(); ++i) {
            const std::string& cell = rows[n][i];
            bool last = i + 1 == rows[n].size();
            if (color && n > 0 && i == 2) line += fmt::format("{}{}\x1b[0m", colour_of(cell), cell);
            else line += cell;
            if (!last) line += std::string(width[i] - cell.size() + 2, ' ');
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out += line + "\n";
    }
    return out;
}

int status_command(const CommandLine& cl) {
    Config cfg;
    std::vector<std::string> errors;
    if (!load_config(cl, cfg, errors)) {
        for (const auto& e : errors) fmt::print(stderr, "kprism status: {}\n", e);
        return kStatusError;
    }
    // The daemon listens on health.bind_address; a wildcard one is reached over loopback.
    std::string host = cfg.s.health_bind_address;
    if (host == "0.0.0.0") host = "127.0.0.1";
    if (host == "::" || host == "[::]") host = "::1";
    auto port = static_cast<uint16_t>(cfg.s.health_port);
    sockaddr_storage ss{};
    std::string where = ip_to_sockaddr(host, port, ss) ? sockaddr_str(reinterpret_cast<sockaddr*>(&ss))
                                                        : fmt::format("{}:{}", host, port);
    int code = 0;
    std::string body, err;
    if (!http_fetch(host, port, "/status", 3000, code, body, err)) {
        fmt::print(stderr, "kprism status: cannot reach the admin endpoint at {}: {}\n", where, err);
        return kStatusError;
    }
    StatusDoc doc;
    if (code != 200) err = fmt::format("HTTP {}", code);
    else if (parse_status_json(body, doc, err)) err.clear();
    else if (err.empty()) err = "malformed /status document";
    if (!err.empty()) {
        fmt::print(stderr, "kprism status: unexpected answer from the admin endpoint at {}: {}\n", where, err);
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
