// SPDX-License-Identifier: Apache-2.0
// Bounded parser of an HTTP/1.x response: the readiness probe's (the upstream is untrusted input)
// and the admin endpoint's /status as `kprism status` and `kprism reload` read it. Hand-written and
// fuzzed for the reason given in http_request.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kprism {

// Feed bytes as they arrive; the parser keeps at most `max_bytes` in total (the head, the body,
// a chunk-size or trailer line in progress). It is done once the status line and headers are
// complete and either the body is complete (Content-Length, or the last chunk and the trailers of a
// chunked body), a short excerpt of it has been read, or the peer closed. It never allocates
// beyond `max_bytes`. Interim answers (1xx: 100 Continue, 103 Early Hints) are read and dropped,
// at most kMaxInterim of them; 101 is an error (nothing asked to switch protocols).
// "Transfer-Encoding: chunked" (alone) is decoded: body() and body_excerpt() hold the data, never
// the framing; a chunk-size line past kMaxChunkLine bytes, a size that is not hex or past 2^60,
// data not followed by CRLF, or trailers past kMaxTrailers bytes are errors. Any other
// Transfer-Encoding is read as it comes, to the close. With a Transfer-Encoding, Content-Length
// is ignored (RFC 9112, 6.3).
// Body::whole: the body is wanted as it is, whatever the status: done only once it is complete
// (Content-Length, the last chunk, else the peer's close); reaching `max_bytes` first is an error.
class HttpResponseParser {
public:
    enum class State { need_more, done, error };
    enum class Body { excerpt, whole };
    static constexpr size_t kMaxInterim = 8;
    static constexpr size_t kMaxChunkLine = 1024;  // with extensions and CRLF
    static constexpr size_t kMaxTrailers = 4096;   // all trailer lines and the final CRLF

    explicit HttpResponseParser(size_t max_bytes = 16384, size_t body_excerpt = 1024, Body mode = Body::excerpt,
                                bool whole_body_for_reuse = false)
        : max_(max_bytes), excerpt_max_(body_excerpt), whole_(mode == Body::whole), for_reuse_(whole_body_for_reuse) {}

    State feed(const char* p, size_t n);
    State eof();  // the peer closed the stream
    State state() const { return state_; }

    int status() const { return status_; }  // of the final answer, once its status line is in
    // The first bytes of the body with control characters replaced, for logs ("[-]etcd failed...").
    std::string body_excerpt() const;
    // The body as received (decoded when chunked), up to Content-Length (Body::whole; with
    // Body::excerpt, what was read).
    std::string body() const;
    const std::string& error() const { return error_; }
    // The response was read exactly to its framed end: a Content-Length body without
    // Transfer-Encoding to its last byte, or a chunked one ("Transfer-Encoding: chunked" alone) to
    // its last chunk and trailers. Then whatever the stream carries after it is no part of it
    // (trailing() says whether the piece that ended it held more). A response done at its headers,
    // at the excerpt or at `max_bytes`, or read to the close, has no known end.
    bool ended() const;
    // Bytes followed the end of the response in the piece that ended it (they were not taken).
    bool trailing() const { return trailing_; }
    // The connection can carry another request: an HTTP/1.1 response, ended(), without
    // "Connection: close", with nothing after it in the piece that ended it; and only with
    // `whole_body_for_reuse`, which makes a response wait for its body (a 2xx, else done at its
    // headers; a chunked one past the excerpt, within `max_bytes`). Whether the stream holds more
    // beyond that piece is the caller's to check.
    bool reusable() const;
    size_t buffered() const { return head_.size() + line_.size() + body_.size(); }  // kept, at most max_bytes
    size_t received() const { return received_; }  // bytes taken in so far (any answer, interim ones too)

private:
    enum class Phase { head, length, to_close, chunk_size, chunk_data, chunk_crlf, trailers, complete };
    State fail(std::string why);
    void step(std::string_view& in);
    void take_head(std::string_view& in);
    void parse_head();  // the head in head_ is complete: headers, then the body's phase
    void take_line(std::string_view& in, size_t limit);
    void chunk_size_line();
    void check_done();
    size_t room() const { return max_ - buffered(); }

    size_t max_;
    size_t excerpt_max_;
    bool whole_;
    bool for_reuse_;
    bool http11_ = false;
    bool conn_close_ = false;
    bool chunked_ = false;  // any Transfer-Encoding
    bool trailing_ = false;  // bytes after the response in the piece that ended it
    Phase phase_ = Phase::head;
    std::string head_;  // the final answer's status line and headers (an interim one's while it is read)
    std::string line_;  // a chunk-size or trailer line being read
    std::string body_;  // decoded
    State state_ = State::need_more;
    int status_ = 0;
    size_t interim_ = 0;
    size_t received_ = 0;
    size_t body_cap_ = 0;  // done when the body reaches it (excerpt mode; SIZE_MAX: no such end)
    uint64_t chunk_left_ = 0;
    size_t crlf_seen_ = 0;
    size_t trailer_bytes_ = 0;
    long long content_length_ = -1;
    std::string error_;
};

}  // namespace kprism
