// SPDX-License-Identifier: Apache-2.0
// Bounded parser of one HTTP/1.x request head, for the admin endpoint; clients are untrusted.
//
// Hand-written on purpose, like the response parser (http_response.h): Debian 12 has no maintained
// C HTTP parser package (libhttp-parser-dev is nodejs/http-parser 2.9, archived upstream; llhttp is
// not packaged), and these two are small, bounded in every dimension and fuzzed
// (tests/fuzz/admin_request_fuzz.cc, readyz_fuzz.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kprism {

struct HttpRequest {
    std::string method;
    std::string target;  // as sent: the path and an optional "?query"
    std::string path;    // before '?'
    std::string query;   // after '?', without it; empty if none
    int minor = 1;       // HTTP/1.<minor>

    // The query has `name` as a parameter, bare ("?verbose") or with a value ("?verbose=1").
    bool has_param(std::string_view name) const;
    // The value of `name` ("" when bare or absent).
    std::string param(std::string_view name) const;
};

// Feed bytes as they arrive. The parser is done at the blank line ending the head; bytes after it
// (a pipelined request, a body) are not consumed: consumed() says where the head ended. It keeps
// at most kMaxHead bytes. On error, error_status() is the HTTP status to answer with:
//   400 malformed (not HTTP, bare LF, bad header line, missing Host in HTTP/1.1, ...)
//   405 a well-formed request whose method is not GET or HEAD (answer with Allow: kAllow)
//   414 request target longer than kMaxTarget
//   431 head longer than kMaxHead
//   505 an HTTP version other than 1.0 and 1.1
class HttpRequestParser {
public:
    enum class State { need_more, done, error };
    static constexpr size_t kMaxHead = 8192;
    static constexpr size_t kMaxTarget = 2048;
    static constexpr size_t kMaxMethod = 32;
    static constexpr const char* kAllow = "GET, HEAD";

    State feed(const char* p, size_t n);
    State feed(std::string_view s) { return feed(s.data(), s.size()); }
    State state() const { return state_; }
    const HttpRequest& request() const { return req_; }
    int error_status() const { return status_; }
    const std::string& error() const { return error_; }
    size_t consumed() const { return consumed_; }
    size_t buffered() const { return buf_.size(); }  // bytes kept so far, at most kMaxHead + 1 (tests, fuzzing)

private:
    State fail(int status, std::string why);
    State check_partial_request_line();
    State parse_request_line(std::string_view line);
    State parse_headers(std::string_view block);

    std::string buf_;
    size_t scanned_ = 0;   // bytes of buf_ searched for the end of the head
    size_t line_end_ = 0;  // end of the request line once found (offset of its CRLF), else 0
    State state_ = State::need_more;
    HttpRequest req_;
    int status_ = 0;
    std::string error_;
    size_t consumed_ = 0;
};

}  // namespace kprism
