// SPDX-License-Identifier: Apache-2.0
// Status line, headers and a bounded body excerpt of a probe response.
#include "kprism/http_response.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kprism {

HttpResponseParser::State HttpResponseParser::fail(std::string why) {
    error_ = std::move(why);
    return state_ = State::error;
}

HttpResponseParser::State HttpResponseParser::feed(const char* p, size_t n) {
    if (state_ != State::need_more) return state_;
    size_t room = max_ - buf_.size();
    buf_.append(p, std::min(n, room));
    State s = parse();
    if (s == State::need_more && buf_.size() >= max_) {
        if (header_end_ == 0) return fail(fmt::format("response headers larger than {} bytes", max_));
        if (whole_) return fail(fmt::format("response larger than {} bytes", max_));
        return state_ = State::done;  // the body excerpt is all we keep
    }
    return s;
}

HttpResponseParser::State HttpResponseParser::eof() {
    if (state_ != State::need_more) return state_;
    if (header_end_ == 0) return fail(buf_.empty() ? "connection closed without a response"
                                                   : "connection closed inside the response headers");
    if (whole_ && content_length_ >= 0 && buf_.size() - header_end_ < static_cast<size_t>(content_length_))
        return fail("connection closed inside the response body");
    return state_ = State::done;
}

HttpResponseParser::State HttpResponseParser::parse() {
    if (header_end_ == 0) {
        // Status line: "HTTP/1.x NNN reason"; checked as soon as its first 12 bytes are in.
        if (buf_.size() >= 5 && buf_.compare(0, 5, "HTTP/") != 0) return fail("not an HTTP response");
        if (buf_.size() >= 12) {
            if (buf_.compare(0, 7, "HTTP/1.") != 0 || !isdigit(static_cast<unsigned char>(buf_[7])) ||
                buf_[8] != ' ')
                return fail("unsupported HTTP version in status line");
            int code = 0;
            for (int i = 9; i < 12; ++i) {
                if (!isdigit(static_cast<unsigned char>(buf_[i]))) return fail("malformed status code");
                code = code * 10 + (buf_[i] - '0');
            }
            if (code < 100) return fail("malformed status code");
            status_ = code;
            http11_ = buf_[7] == '1';
        }
        size_t end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) return State::need_more;
        if (status_ == 0) return fail("malformed status line");
        header_end_ = end + 4;
        // Content-Length, case-insensitively; anything unparsable is ignored (read to the bound/EOF).
        // Connection and Transfer-Encoding only decide whether the connection is reused.
        size_t line = buf_.find("\r\n") + 2;
        while (line < end) {
            size_t next = buf_.find("\r\n", line);
            std::string_view h(buf_.data() + line, next - line);
            std::string lower(h.substr(0, std::min<size_t>(h.size(), 64)));
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            if (lower.rfind("connection:", 0) == 0 && lower.find("close") != std::string::npos) conn_close_ = true;
            if (lower.rfind("transfer-encoding:", 0) == 0) chunked_ = true;
            if (h.size() > 15) {
                std::string name(h.substr(0, 15));
                std::transform(name.begin(), name.end(), name.begin(), ::tolower);
                if (name == "content-length:") {
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
            }
            line = next + 2;
        }
    }
    size_t body = buf_.size() - header_end_;
    if (whole_) {
        if (content_length_ >= 0 && header_end_ + static_cast<size_t>(content_length_) > max_)
            return fail(fmt::format("response larger than {} bytes", max_));
        if (content_length_ >= 0 && body >= static_cast<size_t>(content_length_)) return state_ = State::done;
        return State::need_more;  // to Content-Length, or to the peer's close
    }
    // Nothing in a ready body matters; read to its end only to reuse the connection.
    const bool to_end = for_reuse_ && content_length_ >= 0 && header_end_ + static_cast<size_t>(content_length_) <= max_;
    if (status_ >= 200 && status_ < 300 && (!to_end || body >= static_cast<size_t>(content_length_)))
        return state_ = State::done;
    if (status_ >= 200 && status_ < 300) return State::need_more;
    if (content_length_ >= 0 && body >= static_cast<size_t>(content_length_)) return state_ = State::done;
    if (body >= excerpt_max_) return state_ = State::done;
    return State::need_more;
}

bool HttpResponseParser::reusable() const {
    return for_reuse_ && state_ == State::done && http11_ && !conn_close_ && !chunked_ && content_length_ >= 0 &&
           header_end_ > 0 && buf_.size() - header_end_ == static_cast<size_t>(content_length_);
}

std::string HttpResponseParser::body_excerpt() const {
    if (header_end_ == 0) return "";
    size_t len = buf_.size() - header_end_;
    if (content_length_ >= 0) len = std::min(len, static_cast<size_t>(content_length_));
    len = std::min(len, excerpt_max_);
    std::string out = buf_.substr(header_end_, len);
    for (auto& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            c = c == '\n' || c == '\r' || c == '\t' ? ' ' : '?';
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

std::string HttpResponseParser::body() const {
    if (header_end_ == 0) return "";
    size_t len = buf_.size() - header_end_;
    if (content_length_ >= 0) len = std::min(len, static_cast<size_t>(content_length_));
    return buf_.substr(header_end_, len);
}

}  // namespace kprism
