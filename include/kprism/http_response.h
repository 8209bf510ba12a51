// SPDX-License-Identifier: Apache-2.0
// Bounded parser of an HTTP/1.x response: the readiness probe's (the upstream is untrusted input)
// and the admin endpoint's /status as `kprism status` and `kprism reload` read it. Hand-written and
// fuzzed for the reason given in http_request.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kprism {

// Feed bytes as they arrive; the parser stops at `max_bytes` in total. It is done once the status
// line and headers are complete and either the body is complete (Content-Length), a short excerpt
// of it has been read, or the peer closed. It never allocates beyond `max_bytes`.
// Body::whole: the body is wanted as it is, whatever the status: done only once it is complete
// (Content-Length, else the peer's close); reaching `max_bytes` first is an error.
class HttpResponseParser {
public:
    enum class State { need_more, done, error };
    enum class Body { excerpt, whole };

    explicit HttpResponseParser(size_t max_bytes = 16384, size_t body_excerpt = 1024, Body mode = Body::excerpt,
                                bool whole_body_for_reuse = false)
        : max_(max_bytes), excerpt_max_(body_excerpt), whole_(mode == Body::whole), for_reuse_(whole_body_for_reuse) {}

    State feed(const char* p, size_t n);
    State eof();  // the peer closed the stream
    State state() const { return state_; }

    int status() const { return status_; }
    // The first bytes of the body with control characters replaced, for logs ("[-]etcd failed...").
    std::string body_excerpt() const;
    // The body as received, up to Content-Length (Body::whole; with Body::excerpt, what was read).
    std::string body() const;
    const std::string& error() const { return error_; }
    // The connection can carry another request: an HTTP/1.1 response, done, with a Content-Length
    // body read exactly to its end (nothing after it), no "Connection: close" and no
    // Transfer-Encoding; and only with `whole_body_for_reuse`, which makes a 2xx wait for its body
    // too (else done at its headers).
    bool reusable() const;
    size_t buffered() const { return buf_.size(); }  // bytes kept so far, at most max_bytes (tests, fuzzing)

private:
    State parse();
    State fail(std::string why);

    size_t max_;
    size_t excerpt_max_;
    bool whole_;
    bool for_reuse_;
    bool http11_ = false;
    bool conn_close_ = false;
    bool chunked_ = false;  // any Transfer-Encoding
    std::string buf_;
    State state_ = State::need_more;
    int status_ = 0;
    size_t header_end_ = 0;  // offset of the body, once known
    long long content_length_ = -1;
    std::string error_;
};

}  // namespace kprism
