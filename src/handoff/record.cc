// SPDX-License-Identifier: Apache-2.0
// The handover record's text format: written by the process that stops, read by the one that starts.
//
//   kprism-handover 1
//   conn <client-local> <client-peer> <upstream-local> <upstream-peer> <upstream> <flags> <age_ms>
//   ...
//   end <number of conn lines>
//
// flags: a decimal bit set, 1 client_eof, 2 client_shut, 4 upstream_eof, 8 upstream_shut.
#include "kprism/handoff/record.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>

#include "kprism/base/address.h"

namespace kprism::handover {

namespace {

constexpr std::string_view kHeader = "kprism-handover 1";

// Splits `line` at single spaces into exactly `n` non-empty tokens of printable characters, each
// up to `max` bytes, the last up to `last_max`.
bool split(std::string_view line, std::string_view* tok, size_t n, size_t last_max = kMaxTokenBytes,
           size_t max = kMaxTokenBytes) {
    for (size_t i = 0; i < n; ++i) {
        size_t sp = line.find(' ');
        const bool last = i + 1 == n;
        if (last != (sp == std::string_view::npos)) return false;
        std::string_view t = line.substr(0, sp);
        if (t.empty() || t.size() > (last ? last_max : max)) return false;
        for (char c : t)
            if (c <= ' ' || c > '~') return false;
        tok[i] = t;
        if (!last) line.remove_prefix(sp + 1);
    }
    return true;
}

bool number(std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
}

std::string address_of(int fd, bool peer) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    auto* sa = reinterpret_cast<sockaddr*>(&ss);
    int r = peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len);
    if (r != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) return {};
    return sockaddr_str(ss);
}

}  // namespace

bool is_handover_name(std::string_view name) {
    return name == kListenerName || name == kConnectionName || name == kStateName || name == kHealthName ||
           name.starts_with(kCrashPrefix);
}

std::string crash_connection_name(unsigned generation) { return fmt::format("{}conn-{}", kCrashPrefix, generation & 1); }
std::string crash_state_name(unsigned generation) { return fmt::format("{}{}", kCrashStatePrefix, generation & 1); }
std::vector<std::string> crash_names() {
    return {std::string(kCrashListenerName), crash_connection_name(0), crash_connection_name(1), crash_state_name(0),
            crash_state_name(1), std::string(kCrashHealthName)};
}

static_assert(notify::kMaxFdsPerMessage % 2 == 0, "a connection's two sockets travel in one message");

int pack_fds(const std::vector<int>& fds, size_t& sent, std::string& error) {
    sent = 0;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        error = fmt::format("socketpair: {}", std::strerror(errno));
        return -1;
    }
    ::fcntl(sv[0], F_SETFL, O_NONBLOCK);  // a full buffer is an error, never a hang
    for (size_t off = 0; off < fds.size();) {
        const size_t n = std::min(notify::kMaxFdsPerMessage, fds.size() - off);
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * notify::kMaxFdsPerMessage)] = {};
        char byte = 'f';
        iovec iov{&byte, 1};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        std::memcpy(CMSG_DATA(c), fds.data() + off, sizeof(int) * n);
        ssize_t r = ::sendmsg(sv[0], &mh, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1) {
            error = fmt::format("sendmsg: {}", r < 0 ? std::strerror(errno) : "short");
            break;
        }
        off += n;
        sent = off;
    }
    ::close(sv[0]);
    if (sent == 0 && !fds.empty()) {
        ::close(sv[1]);
        return -1;
    }
    return sv[1];
}

std::vector<int> unpack_fds(int carrier, bool& truncated) {
    truncated = false;
    std::vector<int> out;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(carrier, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX)
        return out;  // not a carrier: nothing is read from it (a stray TCP socket keeps its bytes)
    for (;;) {
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * (notify::kMaxFdsPerMessage + 3))];
        char byte;
        iovec iov{&byte, 1};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof ctl;
        ssize_t r = ::recvmsg(carrier, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;  // the end of the queue (EAGAIN) or of the stream
        if (mh.msg_flags & MSG_CTRUNC) truncated = true;
        for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                out.push_back(fd);
            }
        }
    }
    return out;
}

std::string inherit_value(size_t listeners, size_t carriers, size_t records) {
    return fmt::format("{},{},{}", listeners, carriers, records);
}

std::vector<notify::ListenFd> inherited_fds(std::string* error) {
    std::string health_var;  // removed whatever follows
    if (const char* h = std::getenv(std::string(kInheritHealthEnv).c_str())) health_var = h;
    ::unsetenv(std::string(kInheritHealthEnv).c_str());
    const char* v = std::getenv(std::string(kInheritEnv).c_str());
    if (!v) return {};
    std::string value = v;
    ::unsetenv(std::string(kInheritEnv).c_str());
    auto fail = [&](std::string why) {
        if (error) *error = fmt::format("{}={}: {}", kInheritEnv, value.substr(0, 64), why);
        return std::vector<notify::ListenFd>{};
    };
    uint64_t n[3];
    std::string_view rest = value;
    for (int i = 0; i < 3; ++i) {
        size_t comma = i < 2 ? rest.find(',') : rest.size();
        if (comma == std::string_view::npos || !number(rest.substr(0, comma), n[i])) return fail("not three counts");
        rest.remove_prefix(std::min(rest.size(), comma + 1));
    }
    if (n[0] > 1024 || n[1] > 1 || n[2] > 1) return fail("counts out of range");
    std::vector<notify::ListenFd> out;
    int fd = 3;
    for (int kind = 0; kind < 3; ++kind)
        for (uint64_t i = 0; i < n[kind]; ++i, ++fd) {
            if (::fcntl(fd, F_GETFD) < 0) return fail(fmt::format("descriptor {} is not open", fd));
            out.push_back({fd, std::string(kind == 0 ? kListenerName : kind == 1 ? kConnectionName : kStateName)});
        }
    // The health record, when the previous process passed one: the descriptor right after those.
    if (uint64_t hfd = 0; !health_var.empty() && number(health_var, hfd) && hfd == static_cast<uint64_t>(fd) &&
                          ::fcntl(fd, F_GETFD) >= 0)
        out.push_back({fd, std::string(kHealthName)});
    for (const notify::ListenFd& x : out) ::fcntl(x.fd, F_SETFD, FD_CLOEXEC);
    return out;
}

std::string serialize(const std::vector<Entry>& entries) {
    std::string out = fmt::format("{}\n", kHeader);
    for (const Entry& e : entries) {
        unsigned flags = (e.client_eof ? 1u : 0u) | (e.client_shut ? 2u : 0u) | (e.upstream_eof ? 4u : 0u) |
                         (e.upstream_shut ? 8u : 0u);
        fmt::format_to(std::back_inserter(out), "conn {} {} {} {} {} {} {}\n", e.client_local, e.client_peer,
                       e.upstream_local, e.upstream_peer, e.upstream, flags, e.age_ms);
    }
    fmt::format_to(std::back_inserter(out), "end {}\n", entries.size());
    return out;
}

int record_memfd(const std::string& text, std::string& error) {
    int fd = ::memfd_create("kprism-handover", MFD_CLOEXEC);
    if (fd < 0) {
        error = fmt::format("memfd: {}", std::strerror(errno));
        return -1;
    }
    for (size_t off = 0; off < text.size();) {
        ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            error = fmt::format("writing the record: {}", n < 0 ? std::strerror(errno) : "short write");
            ::close(fd);
            return -1;
        }
        off += static_cast<size_t>(n);
    }
    return fd;
}

bool parse(std::string_view text, std::vector<Entry>& out, std::string& error) {
    out.clear();
    auto fail = [&](std::string why) {
        out.clear();
        error = std::move(why);
        return false;
    };
    if (text.size() > kMaxRecordBytes) return fail(fmt::format("larger than {} bytes", kMaxRecordBytes));
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos || text.substr(0, nl) != kHeader) {
        std::string_view first = text.substr(0, std::min<size_t>(nl, 40));
        return fail(fmt::format("not a version 1 record (first line {:?})", std::string(first)));
    }
    text.remove_prefix(nl + 1);
    for (size_t lineno = 2;; ++lineno) {
        nl = text.find('\n');
        if (nl == std::string_view::npos) return fail(fmt::format("truncated at line {} (no end line)", lineno));
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        std::string_view t[8];
        if (line.starts_with("end ")) {
            uint64_t n = 0;
            if (!split(line, t, 2) || !number(t[1], n) || n != out.size())
                return fail(fmt::format("line {}: {:?} does not close {} entries", lineno, std::string(line.substr(0, 40)),
                                        out.size()));
            if (!text.empty()) return fail(fmt::format("bytes after the end line (line {})", lineno + 1));
            return true;
        }
        uint64_t flags = 0, age = 0;
        if (!line.starts_with("conn ") || !split(line, t, 8) || !number(t[6], flags) || flags > 15 ||
            !number(t[7], age))
            return fail(fmt::format("line {} is not a conn line", lineno));
        if (out.size() >= kMaxEntries) return fail(fmt::format("more than {} entries", kMaxEntries));
        Entry e;
        e.client_local = t[1];
        e.client_peer = t[2];
        e.upstream_local = t[3];
        e.upstream_peer = t[4];
        e.upstream = t[5];
        e.client_eof = flags & 1;
        e.client_shut = flags & 2;
        e.upstream_eof = flags & 4;
        e.upstream_shut = flags & 8;
        e.age_ms = age;
        out.push_back(std::move(e));
    }
}

std::vector<Entry> merge(const std::vector<std::string>& records, std::string& error) {
    std::vector<Entry> out;
    std::set<std::string> seen;
    for (const std::string& r : records) {
        std::vector<Entry> part;
        std::string why;
        if (!parse(r, part, why)) {
            error = why;
            continue;
        }
        for (Entry& e : part)
            if (seen.insert(e.client_local + " " + e.client_peer).second) out.push_back(std::move(e));
    }
    return out;
}

namespace {

// Bytes outside '!'..'~', and '%', as %XX: the error is one token.
std::string escape_token(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, kMaxErrorBytes)) {
        if (c > ' ' && c <= '~' && c != '%') out += c;
        else fmt::format_to(std::back_inserter(out), "%{:02X}", static_cast<unsigned char>(c));
    }
    return out.empty() ? "-" : out;
}

bool unescape_token(std::string_view s, std::string& out) {
    out.clear();
    if (s == "-") return true;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        unsigned v = 0;
        if (i + 2 >= s.size()) return false;
        auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
        if (ec != std::errc() || p != s.data() + i + 3) return false;
        out += static_cast<char>(v);
        i += 2;
    }
    return out.size() <= kMaxErrorBytes;
}

template <class Table, class E>
bool enum_named(const Table& table, std::string_view name, E& out) {
    for (const auto& row : table)
        if (name == row.name) {
            out = static_cast<E>(&row - &table[0]);
            return true;
        }
    return false;
}

bool health_named(std::string_view s, Health& h) {
    for (Health x : {Health::unknown, Health::up, Health::down})
        if (s == health_name(x)) {
            h = x;
            return true;
        }
    return false;
}

bool credentials_named(std::string_view s, CredentialsState& c) {
    for (CredentialsState x : {CredentialsState::unknown, CredentialsState::ok, CredentialsState::rejected})
        if (s == credentials_state_name(x)) {
            c = x;
            return true;
        }
    return false;
}

bool failing_named(std::string_view s, FailingChecks& f) {
    f = {};
    if (s == "-") return true;
    while (!s.empty()) {
        size_t comma = s.find(',');
        std::string_view n = s.substr(0, comma);
        if (n.empty() || n.size() > FailingChecks::kMaxNameLen || f.names.size() >= FailingChecks::kMaxNames)
            return false;
        for (char c : n)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '/' && c != '_' && c != '.' && c != '-')
                return false;
        f.names.emplace_back(n);
        if (comma == std::string_view::npos) break;
        s.remove_prefix(comma + 1);
    }
    return true;
}

// The TLS content line's value: the SHA-256 of each of the three files, in hex.
bool tls_content_valid(std::string_view hex) {
    return hex.size() == 3 * 64 && hex.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// One "up" line (without its keyword); false when it does not parse.
bool parse_upstream(std::string_view line, UpstreamHealth& u) {
    std::string_view t[13];
    uint64_t rises = 0, falls = 0, flags = 0, age = 0, more = 0;
    // The longest tokens: an upstream name (a hostname of 253 bytes, '@', an IPv6 address and
    // port) and the failing checks (kMaxNames names of kMaxNameLen bytes and their commas).
    constexpr size_t kMaxHealthToken =
        std::max<size_t>(kMaxTokenBytes + 64, FailingChecks::kMaxNames * (FailingChecks::kMaxNameLen + 1));
    if (!split(line, t, 13, 3 * kMaxErrorBytes, kMaxHealthToken) || !health_named(t[2], u.health) || !number(t[4], rises) || rises > 1000000 ||
        !number(t[5], falls) || falls > 1000000 || !enum_named(kDownReasonTable, t[6], u.down_reason) ||
        !number(t[7], flags) || flags > 7 || !number(t[8], age) || !failing_named(t[10], u.failing_checks) ||
        !number(t[11], more) || more > 1000000 || !unescape_token(t[12], u.last_error))
        return false;
    int64_t change = 0;
    if (auto [p, ec] = std::from_chars(t[9].data(), t[9].data() + t[9].size(), change);
        ec != std::errc() || p != t[9].data() + t[9].size() || change < 0)
        return false;
    u.has_result = flags & 1;
    u.passed_check = flags & 2;
    u.close_held = flags & 4;
    if (t[3] == "-") u.has_result = false;
    else if (!enum_named(kCheckResultTable, t[3], u.last_result)) return false;
    u.name = t[1];
    u.rises = static_cast<uint32_t>(rises);
    u.falls = static_cast<uint32_t>(falls);
    u.result_age_ms = age;
    u.last_change_unix = change;
    u.failing_checks.more = static_cast<size_t>(more);
    return true;
}

}  // namespace

uint64_t health_checksum(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
}

uint64_t boottime_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

std::string serialize_health(const HealthRecord& r) {
    std::string out = fmt::format("{}\nat {}\nnode {} {}\n", kHealthHeader, r.at_ms, credentials_state_name(r.credentials),
                                  (r.failing_open ? 1 : 0) | (r.etcd_quorum_lost ? 2 : 0));
    size_t lines = 2, n = 0;
    if (tls_content_valid(r.tls_content)) {
        fmt::format_to(std::back_inserter(out), "tls {}\n", r.tls_content);
        ++lines;
    }
    for (const UpstreamHealth& u : r.upstreams) {
        if (n++ >= kMaxHealthEntries) break;
        std::string checks;
        for (const std::string& c : u.failing_checks.names) checks += (checks.empty() ? "" : ",") + c;
        unsigned flags = (u.has_result ? 1u : 0u) | (u.passed_check ? 2u : 0u) | (u.close_held ? 4u : 0u);
        fmt::format_to(std::back_inserter(out), "up {} {} {} {} {} {} {} {} {} {} {} {}\n", u.name, health_name(u.health),
                       u.has_result ? result_name(u.last_result) : "-", u.rises, u.falls, down_reason_name(u.down_reason),
                       flags, u.result_age_ms, std::max<int64_t>(u.last_change_unix, 0), checks.empty() ? "-" : checks,
                       u.failing_checks.more, escape_token(u.last_error));
        ++lines;
    }
    fmt::format_to(std::back_inserter(out), "end {} {:016x}\n", lines, health_checksum(out));
    return out;
}

bool parse_health(std::string_view text, HealthRecord& out, std::string& error) {
    out = {};
    auto fail = [&](std::string why) {
        out = {};
        error = std::move(why);
        return false;
    };
    if (text.size() > kMaxHealthBytes) return fail(fmt::format("larger than {} bytes", kMaxHealthBytes));
    const std::string_view whole = text;
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos || text.substr(0, nl) != kHealthHeader)
        return fail(fmt::format("not a version 1 health record (first line {:?})",
                                std::string(text.substr(0, std::min<size_t>(nl, 40)))));
    text.remove_prefix(nl + 1);
    bool have_at = false;
    size_t ignored = 0;
    for (size_t lines = 0;; ++lines) {
        nl = text.find('\n');
        if (nl == std::string_view::npos) return fail("truncated (no end line)");
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        std::string_view t[3];
        uint64_t n = 0, sum = 0;
        if (line.starts_with("end ")) {
            if (!split(line, t, 3) || !number(t[1], n) || n != lines) return fail("the end line does not match");
            const std::string_view before = whole.substr(0, whole.size() - text.size() - line.size() - 1);
            if (auto [p, ec] = std::from_chars(t[2].data(), t[2].data() + t[2].size(), sum, 16);
                ec != std::errc() || p != t[2].data() + t[2].size() || sum != health_checksum(before))
                return fail("the checksum does not match (torn or altered)");
            if (!text.empty()) return fail("bytes after the end line");
            if (!have_at) return fail("no at line");
            if (ignored) error = fmt::format("{} lines ignored", ignored);
            return true;
        }
        if (lines >= kMaxHealthEntries + 16) return fail("too many lines");
        if (line.starts_with("at ") && split(line, t, 2) && number(t[1], n)) {
            out.at_ms = n;
            have_at = true;
        } else if (line.starts_with("node ") && split(line, t, 3) && credentials_named(t[1], out.credentials) &&
                   number(t[2], n) && n <= 3) {
            out.failing_open = n & 1;
            out.etcd_quorum_lost = n & 2;
        } else if (line.starts_with("tls ") && split(line, t, 2) && tls_content_valid(t[1])) {
            out.tls_content = t[1];
        } else if (UpstreamHealth u; line.starts_with("up ") && out.upstreams.size() < kMaxHealthEntries &&
                                     parse_upstream(line, u)) {
            bool dup = false;
            for (const UpstreamHealth& x : out.upstreams) dup = dup || x.name == u.name;
            if (dup) ++ignored;
            else out.upstreams.push_back(std::move(u));
        } else {
            ++ignored;  // another kind (a later version's) or a line that does not parse
        }
    }
}

std::string local_address(int fd) { return address_of(fd, false); }
std::string peer_address(int fd) { return address_of(fd, true); }

}  // namespace kprism::handover
