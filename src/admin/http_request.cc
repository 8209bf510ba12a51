// SPDX-License-Identifier: Apache-2.0
// Request line, headers and bounds of an admin HTTP request; path and query split.
#include "kprism/admin/http_request.h"

#include <fmt/format.h>

#include <algorithm>

namespace kprism {

namespace {

// RFC 9110 token characters.
bool tchar(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

bool HttpRequest::has_param(std::string_view name) const {
    std::string_view q = query;
    while (!q.empty()) {
        size_t amp = q.find('&');
        std::string_view item = q.substr(0, amp);
        if (item.substr(0, item.find('=')) == name) return true;
        if (amp == std::string_view::npos) break;
        q.remove_prefix(amp + 1);
    }
    return false;
}

std::string HttpRequest::param(std::string_view name) const {
    std::string_view q = query;
    while (!q.empty()) {
        size_t amp = q.find('&');
        std::string_view item = q.substr(0, amp);
        size_t eq = item.find('=');
        if (item.substr(0, eq) == name) return eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1));
        if (amp == std::string_view::npos) break;
        q.remove_prefix(amp + 1);
    }
    return "";
}

HttpRequestParser::State HttpRequestParser::fail(int status, std::string why) {
    status_ = status;
    error_ = std::move(why);
    return state_ = State::error;
}

HttpRequestParser::State HttpRequestParser::feed(const char* p, size_t n) {
    if (state_ != State::need_more) return state_;
    // One byte over the bound is enough to know it is exceeded.
    size_t room = kMaxHead + 1 - buf_.size();
    buf_.append(p, std::min(n, room));
    // Find the end of the request line, then of the head, scanning each byte once. A LF must
    // follow a CR; control bytes other than HTAB are rejected anywhere in the head.
    for (; scanned_ < buf_.size(); ++scanned_) {
        char c = buf_[scanned_];
        auto u = static_cast<unsigned char>(c);
        if (c != '\n' && scanned_ > 0 && buf_[scanned_ - 1] == '\r') return fail(400, "bare CR in request head");
        if (c == '\n') {
            if (scanned_ == 0 || buf_[scanned_ - 1] != '\r') return fail(400, "bare LF in request head");
            if (line_end_ == 0) {
                line_end_ = scanned_ - 1;
                if (State s = parse_request_line(std::string_view(buf_).substr(0, line_end_)); s != State::need_more)
                    return s;
            } else if (scanned_ >= 3 && buf_[scanned_ - 2] == '\n') {
                consumed_ = scanned_ + 1;
                if (consumed_ > kMaxHead) return fail(431, fmt::format("request head larger than {} bytes", kMaxHead));
                size_t start = line_end_ + 2;
                return parse_headers(std::string_view(buf_).substr(start, scanned_ - 1 - start));
            }
        } else if ((u < 0x20 && c != '\t' && c != '\r') || u == 0x7f) {
            return fail(400, "control character in request head");
        }
    }
    if (line_end_ == 0) {
        if (State s = check_partial_request_line(); s != State::need_more) return s;
    }
    if (buf_.size() > kMaxHead) {
        if (line_end_ == 0) return fail(414, fmt::format("request target longer than {} bytes", kMaxTarget));
        return fail(431, fmt::format("request head larger than {} bytes", kMaxHead));
    }
    return State::need_more;
}

// Rejects garbage (a TLS ClientHello, a binary protocol) and over-long targets before the line ends.
HttpRequestParser::State HttpRequestParser::check_partial_request_line() {
    std::string_view s = buf_;
    size_t sp = s.find(' ');
    std::string_view method = s.substr(0, sp);
    for (char c : method)
        if (!tchar(c)) return fail(400, "malformed request line");
    if (method.size() > kMaxMethod || (sp == 0 && !s.empty())) return fail(400, "malformed request line");
    if (sp != std::string_view::npos) {
        std::string_view rest = s.substr(sp + 1);
        size_t sp2 = rest.find(' ');
        std::string_view target = rest.substr(0, sp2);
        if (!target.empty() && target[0] != '/') return fail(400, "request target must start with '/'");
        if (target.size() > kMaxTarget) return fail(414, fmt::format("request target longer than {} bytes", kMaxTarget));
        // "HTTP/1.1" and its CR are 9 bytes: anything longer after the target is not a version.
        if (sp2 != std::string_view::npos && rest.size() - sp2 - 1 > 9) return fail(400, "malformed request line");
    }
    return State::need_more;
}

HttpRequestParser::State HttpRequestParser::parse_request_line(std::string_view line) {
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return fail(400, "malformed request line");
    std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                     version = line.substr(sp2 + 1);
    if (method.empty() || method.size() > kMaxMethod || !std::all_of(method.begin(), method.end(), tchar))
        return fail(400, "malformed method");
    if (target.size() > kMaxTarget) return fail(414, fmt::format("request target longer than {} bytes", kMaxTarget));
    if (target.empty() || target[0] != '/') return fail(400, "request target must start with '/'");
    for (char c : target)
        if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            return fail(400, "invalid character in request target");
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
        version[5] > '9' || version[7] < '0' || version[7] > '9')
        return fail(400, "malformed HTTP version");
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
        return fail(505, fmt::format("HTTP version {} not supported", version));
    req_.method = std::string(method);
    req_.target = std::string(target);
    size_t q = target.find('?');
    req_.path = std::string(target.substr(0, q));
    req_.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
    req_.minor = version[7] - '0';
    return State::need_more;
}

// `block`: the header lines between the request line's CRLF and the blank line, each ending CRLF.
HttpRequestParser::State HttpRequestParser::parse_headers(std::string_view block) {
    int hosts = 0;
    while (!block.empty()) {
        size_t eol = block.find("\r\n");
        std::string_view line = block.substr(0, eol);
        block.remove_prefix(eol + 2);
        if (line.empty() || line[0] == ' ' || line[0] == '\t') return fail(400, "obsolete line folding in headers");
        size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header line");
        std::string_view name = line.substr(0, colon);
        if (!std::all_of(name.begin(), name.end(), tchar)) return fail(400, "malformed header name");
        if (iequals(name, "host")) ++hosts;
    }
    if (req_.minor == 1 && hosts != 1) return fail(400, hosts == 0 ? "missing Host header" : "more than one Host header");
    if (req_.method != "GET" && req_.method != "HEAD")
        return fail(405, fmt::format("method {} not allowed", req_.method));
    return state_ = State::done;
}

}  // namespace kprism
