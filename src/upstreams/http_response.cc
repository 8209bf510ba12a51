// SPDX-License-Identifier: Apache-2.0
// Status line, headers and a bounded body (or excerpt) of a probe response; interim answers skipped, chunked bodies decoded.
#include "kprism/upstreams/http_response.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace kprism {

namespace {

std::string_view trim(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

// A bad line quoted in an error: at most 32 bytes, anything not printable ASCII as '?'.
std::string quote(std::string_view s) {
    std::string out(s.substr(0, 32));
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return s.size() > 32 ? out + "..." : out;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

HttpResponseParser::State HttpResponseParser::fail(std::string why) {
    error_ = std::move(why);
    return state_ = State::error;
}

// Each step takes what it may of `in` and stops at every bound, so that the outcome does not
// depend on how the bytes arrive.
HttpResponseParser::State HttpResponseParser::feed(const char* p, size_t n) {
    if (state_ != State::need_more) return state_;
    std::string_view in(p, n);
    while (state_ == State::need_more && !in.empty()) {
        size_t before = in.size();
        step(in);
        if (state_ == State::need_more) check_done();
        if (in.size() == before && state_ == State::need_more) break;  // every bound ends the parse; never spin
    }
    received_ += n - in.size();
    if (state_ == State::done && !in.empty()) trailing_ = true;
    return state_;
}

void HttpResponseParser::step(std::string_view& in) {
    auto take_body = [&](uint64_t limit) {
        size_t take = std::min({in.size(), room(), body_cap_ - body_.size()});
        take = static_cast<size_t>(std::min<uint64_t>(take, limit));
        body_.append(in.substr(0, take));
        in.remove_prefix(take);
        return take;
    };
    switch (phase_) {
    case Phase::head:
        take_head(in);
        break;
    case Phase::length:
        take_body(static_cast<uint64_t>(content_length_) - body_.size());
        break;
    case Phase::to_close:
        take_body(UINT64_MAX);
        break;
    case Phase::chunk_size:
        take_line(in, kMaxChunkLine);
        break;
    case Phase::chunk_data:
        chunk_left_ -= take_body(chunk_left_);
        if (chunk_left_ == 0) {
            phase_ = Phase::chunk_crlf;
            crlf_seen_ = 0;
        }
        break;
    case Phase::chunk_crlf:
        if (in.front() != "\r\n"[crlf_seen_]) {
            fail("malformed chunked body: a chunk's data not followed by CRLF");
            break;
        }
        in.remove_prefix(1);
        if (++crlf_seen_ == 2) phase_ = Phase::chunk_size;
        break;
    case Phase::trailers:
        take_line(in, kMaxTrailers - trailer_bytes_);
        break;
    case Phase::complete:
        break;
    }
}

void HttpResponseParser::take_head(std::string_view& in) {
    size_t scanned = head_.size();
    size_t take = std::min(in.size(), room());
    head_.append(in.substr(0, take));
    size_t end = head_.find("\r\n\r\n", scanned >= 3 ? scanned - 3 : 0);
    if (end != std::string::npos) {  // what follows the head is given back
        take -= head_.size() - (end + 4);
        head_.resize(end + 4);
    }
    in.remove_prefix(take);
    // Status line: "HTTP/1.x NNN reason"; checked as soon as its first 12 bytes are in.
    if (head_.size() >= 5 && head_.compare(0, 5, "HTTP/") != 0) {
        fail("not an HTTP response");
        return;
    }
    if (head_.size() >= 12 && status_ == 0) {
        if (head_.compare(0, 7, "HTTP/1.") != 0 || !isdigit(static_cast<unsigned char>(head_[7])) || head_[8] != ' ') {
            fail("unsupported HTTP version in status line");
            return;
        }
        int code = 0;
        for (int i = 9; i < 12; ++i) {
            if (!isdigit(static_cast<unsigned char>(head_[i]))) {
                fail("malformed status code");
                return;
            }
            code = code * 10 + (head_[i] - '0');
        }
        if (code < 100) {
            fail("malformed status code");
            return;
        }
        status_ = code;
        http11_ = head_[7] == '1';
    }
    if (end == std::string::npos) return;
    if (status_ == 0) {
        fail("malformed status line");
        return;
    }
    parse_head();
}

void HttpResponseParser::parse_head() {
    if (status_ < 200) {  // an interim answer: the final one follows on the same stream
        if (status_ == 101) {
            fail("101 Switching Protocols, not asked for");
            return;
        }
        if (++interim_ > kMaxInterim) {
            fail(fmt::format("more than {} interim (1xx) responses", kMaxInterim));
            return;
        }
        head_.clear();
        status_ = 0;
        http11_ = false;
        return;
    }
    // Content-Length, case-insensitively; anything unparsable is ignored (read to the bound/EOF).
    size_t te_headers = 0;
    bool te_chunked = false;
    size_t end = head_.size() - 4;
    size_t line = head_.find("\r\n") + 2;
    while (line < end) {
        size_t next = head_.find("\r\n", line);
        std::string_view h(head_.data() + line, next - line);
        std::string lower(h.substr(0, std::min<size_t>(h.size(), 64)));
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (lower.rfind("connection:", 0) == 0 && lower.find("close") != std::string::npos) conn_close_ = true;
        if (lower.rfind("transfer-encoding:", 0) == 0) {
            ++te_headers;
            te_chunked = iequals(trim(h.substr(18)), "chunked");
        }
        if (lower.rfind("content-length:", 0) == 0) {
            std::string_view v = h.substr(15);
            while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
            long long cl = 0;
            bool ok = !v.empty() && v.size() < 16;
            for (char c : v) ok = ok && isdigit(static_cast<unsigned char>(c));
            if (ok) {
                for (char c : v) cl = cl * 10 + (c - '0');
                content_length_ = cl;
            }
        }
        line = next + 2;
    }
    chunked_ = te_headers > 0;
    if (chunked_) content_length_ = -1;  // Transfer-Encoding wins (RFC 9112, 6.3)
    const bool has_length = content_length_ >= 0;
    const auto length = static_cast<size_t>(content_length_);
    body_cap_ = SIZE_MAX;
    // "Transfer-Encoding: chunked" alone ends where the last chunk and the trailers do: read to
    // there, within max_bytes, when the connection is to be reused.
    const bool chunked_to_end = for_reuse_ && te_headers == 1 && te_chunked;
    if (whole_) {
        if (has_length && head_.size() + length > max_)
            {
            fail(fmt::format("response larger than {} bytes", max_));
            return;
        }
    } else if (status_ < 300) {
        // Nothing in a ready body matters; read to its end only to reuse the connection.
        if (!chunked_to_end && !(for_reuse_ && has_length && head_.size() + length <= max_)) {
            state_ = State::done;
            return;
        }
        body_cap_ = chunked_to_end ? SIZE_MAX : length;
    } else if (!chunked_to_end) {
        body_cap_ = has_length ? std::min(length, excerpt_max_) : excerpt_max_;
    }
    phase_ = chunked_ ? (te_headers == 1 && te_chunked ? Phase::chunk_size : Phase::to_close)
                      : has_length ? Phase::length : Phase::to_close;
}

// A chunk-size or trailer line, CRLF-terminated, at most `limit` bytes with the CRLF.
void HttpResponseParser::take_line(std::string_view& in, size_t limit) {
    size_t nl = in.find('\n');
    size_t take = std::min({nl == std::string_view::npos ? in.size() : nl + 1, room(), limit + 1 - line_.size()});
    line_.append(in.substr(0, take));
    in.remove_prefix(take);
    if (line_.size() > limit) {
        fail(phase_ == Phase::chunk_size ? fmt::format("chunk-size line longer than {} bytes", kMaxChunkLine)
                                         : fmt::format("chunked body's trailers longer than {} bytes", kMaxTrailers));
        return;
    }
    if (line_.empty() || line_.back() != '\n') return;
    if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
        fail("malformed chunked body: a line not ended by CRLF");
        return;
    }
    if (phase_ == Phase::chunk_size) {
        chunk_size_line();
    } else {
        trailer_bytes_ += line_.size();
        if (line_.size() == 2) phase_ = Phase::complete;  // the blank line after the trailers
    }
    line_.clear();
}

// "1a2b[;ext...]": hex digits, then nothing, or an extension (ignored) after optional blanks.
void HttpResponseParser::chunk_size_line() {
    std::string_view l(line_.data(), line_.size() - 2);
    uint64_t size = 0;
    size_t i = 0;
    for (; i < l.size() && hex_value(l[i]) >= 0; ++i) {
        if (size >= (uint64_t{1} << 56)) {
            fail(fmt::format("chunk size '{}' too large", quote(l)));
            return;
        }
        size = size * 16 + static_cast<uint64_t>(hex_value(l[i]));
    }
    std::string_view rest = trim(l.substr(i));
    if (i == 0 || (!rest.empty() && rest.front() != ';')) {
        fail(fmt::format("malformed chunk size '{}'", quote(l)));
        return;
    }
    if (size == 0) {
        phase_ = Phase::trailers;
        trailer_bytes_ = 0;
    } else {
        chunk_left_ = size;
        phase_ = Phase::chunk_data;
    }
}

void HttpResponseParser::check_done() {
    if (phase_ == Phase::head) {
        if (room() == 0) fail(fmt::format("response headers larger than {} bytes", max_));
        return;
    }
    if (phase_ == Phase::complete || (phase_ == Phase::length && body_.size() == static_cast<size_t>(content_length_)) ||
        (!whole_ && body_.size() >= body_cap_)) {
        state_ = State::done;
        return;
    }
    if (room() == 0) {
        if (whole_) fail(fmt::format("response larger than {} bytes", max_));
        else state_ = State::done;  // the body excerpt is all we keep
    }
}

HttpResponseParser::State HttpResponseParser::eof() {
    if (state_ != State::need_more) return state_;
    if (phase_ == Phase::head)
        return fail(!head_.empty()   ? "connection closed inside the response headers"
                    : interim_ > 0 ? "connection closed after an interim (1xx) response"
                                   : "connection closed without a response");
    if (whole_ && phase_ == Phase::length) return fail("connection closed inside the response body");
    if (whole_ && phase_ != Phase::to_close) return fail("connection closed inside the chunked body");
    return state_ = State::done;
}

bool HttpResponseParser::ended() const {
    if (state_ != State::done) return false;
    if (phase_ == Phase::complete) return true;  // reached only through "Transfer-Encoding: chunked" alone
    return !chunked_ && content_length_ >= 0 && phase_ == Phase::length &&
           body_.size() == static_cast<size_t>(content_length_);
}

bool HttpResponseParser::reusable() const {
    return for_reuse_ && ended() && http11_ && !conn_close_ && !trailing_;
}

std::string HttpResponseParser::body_excerpt() const {
    std::string out = body_.substr(0, std::min(body_.size(), excerpt_max_));
    for (auto& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            c = c == '\n' || c == '\r' || c == '\t' ? ' ' : '?';
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

std::string HttpResponseParser::body() const { return body_; }

}  // namespace kprism
