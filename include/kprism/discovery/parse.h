// SPDX-License-Identifier: Apache-2.0
// The pure parsing layer of discovery: a streamed HTTP/1.1 response, the watch stream's lines, and
// EndpointSlice lists and watch events as kube-apiserver sends them (src/discovery/parse.cc). No
// sockets, no loop: the apiserver's answer is untrusted input, bounded here in every dimension and
// fuzzed (tests/fuzz/discovery_fuzz.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/address.h"

namespace kprism {

// Streamed HTTP/1.1 response reader: a bounded head (status line + headers, at most kMaxResponseHead bytes
// including the blank line, at most kMaxHeaderLines header lines), then the body by
// Transfer-Encoding: chunked, Content-Length, or until EOF. Body bytes are handed out as they
// arrive, never buffered here; only a chunk-size or trailer line is kept (at most kMaxLine bytes).
// Lines end in CRLF; a bare LF or CR in the head is an error. Transfer-Encoding other than
// "chunked", a repeated or unparsable Content-Length, and an interim (1xx) response are errors.
// 204 and 304 have no body. Bytes after the end of the response are ignored (one request per
// connection). Done or failed stays so.
class HttpStream {
public:
    enum class State { head, body, done, error };
    static constexpr size_t kMaxResponseHead = 16384;
    static constexpr size_t kMaxHeaderLines = 100;
    static constexpr size_t kMaxLine = 4096;  // a chunk-size line (with extensions) or a trailer line

    // Feeds received bytes; body bytes go to on_body (may be called several times per feed, never
    // with an empty piece). false on a malformed response or when on_body returns false (then
    // error() is what on_body set via fail(), or "body rejected" if it set nothing). Once done,
    // true without calling on_body; once failed, false.
    bool feed(std::string_view data, const std::function<bool(std::string_view)>& on_body);
    // The peer closed: the body delimited by EOF ends here (done); a truncated head/chunk/content is
    // an error. true when done.
    bool eof();
    // Fails the stream with `why` (from on_body, or the caller's own reason).
    void fail(std::string why);

    State state() const { return state_; }
    int status() const { return status_; }  // once the head is read (state body or done), else 0
    const std::string& error() const { return error_; }
    bool chunked() const { return chunked_; }  // for tests
    long long content_length() const { return content_length_; }  // -1 when absent (tests)

private:
    enum class Chunk { size_line, data, data_crlf, trailers };
    bool fail_false(std::string why);
    bool parse_head();
    bool feed_body(std::string_view data, const std::function<bool(std::string_view)>& on_body);
    bool feed_chunked(std::string_view data, const std::function<bool(std::string_view)>& on_body);
    bool chunk_line(std::string_view line);
    bool hand_out(std::string_view piece, const std::function<bool(std::string_view)>& on_body);

    State state_ = State::head;
    std::string head_;  // the head so far, at most kMaxResponseHead bytes
    int status_ = 0;
    bool chunked_ = false;
    long long content_length_ = -1;
    uint64_t left_ = 0;  // bytes left of the content (Content-Length) or of the current chunk
    Chunk chunk_ = Chunk::size_line;
    std::string line_;       // a partial chunk-size or trailer line
    size_t crlf_seen_ = 0;   // of the CRLF after a chunk's data
    size_t trailer_bytes_ = 0, trailer_lines_ = 0;
    std::string error_;
};

// Splits a watch stream into newline-delimited JSON objects (kube-apiserver's watch framing is one
// JSON object per line), each at most `max` bytes (1 MiB default, not counting the LF and an
// optional CR before it); a longer line is an error. Empty lines are skipped. A line is handed out
// without copying when it lies whole in one feed; else at most `max` bytes are kept.
class LineSplitter {
public:
    explicit LineSplitter(size_t max = 1 << 20) : max_(max) {}
    // false (and stays so) on an over-long line or when on_line returns false ("line rejected").
    bool feed(std::string_view data, const std::function<bool(std::string_view line)>& on_line);
    const std::string& error() const { return error_; }
    // Bytes of an unfinished line kept (a stream that ends with buffered() != 0 was cut inside an
    // event); at most max, or max + 1 when the last is a CR (its LF may follow).
    size_t buffered() const { return buf_.size(); }

private:
    size_t max_;
    std::string buf_;
    std::string error_;
};

struct DiscoveredSlice {
    std::string name;
    // Admitted endpoints in the slice's order, without duplicates: is_ip always, port != 0, host the
    // canonical text of the address (inet_ntop: "fd00::1", never "fd00:0::1"), without brackets.
    std::vector<HostPort> endpoints;
    // By HostPort::str() of an admitted endpoint (the first entry of a repeated address): its
    // `zone` when that passes valid_zone() and is not empty; else, when the slice gave one that
    // does not, why it was ignored in zone_errors ("'x y' is not a label value ...", no field
    // path: the same zone reads the same in a list and in a watch event; the endpoint is admitted
    // all the same).
    std::map<std::string, std::string> zones, zone_errors;
};
struct SliceList {
    std::string resource_version;
    std::vector<DiscoveredSlice> items;
};
enum class WatchEventType { added, modified, deleted, bookmark, error };
struct WatchEvent {
    WatchEventType type{};
    DiscoveredSlice slice;         // added, modified, deleted
    std::string resource_version;  // the object's metadata.resourceVersion (all but error)
    int code = 0;                  // error: the Status's code (410: resource version too old)
    std::string message;           // error: the Status's message, at most 512 bytes
};
inline constexpr size_t kMaxSliceListBytes = 4u << 20, kMaxWatchEventBytes = 1u << 20, kMaxSliceEndpoints = 1000,
                        kMaxSlices = 32;

// A resourceVersion kprism may send back in a watch's query. Kubernetes calls it opaque;
// kube-apiserver sends etcd's revision in decimal. Accepted: 1 to kMaxResourceVersion bytes of
// [0-9A-Za-z._-], nothing that could end the query, the request line or a header. Every
// resourceVersion read from the network (a list's, an event's, a bookmark's) passes here.
inline constexpr size_t kMaxResourceVersion = 64;
bool valid_resource_version(std::string_view rv);

// An endpoint's zone (discovery.k8s.io/v1 Endpoint.zone, the node's topology.kubernetes.io/zone
// label): a Kubernetes label value, at most kMaxZone bytes of [A-Za-z0-9._-], beginning and ending
// with a letter or digit; empty is valid (no zone). False with `why` (naming the value, quoted and
// cut to 64 bytes) for anything else.
inline constexpr size_t kMaxZone = 63;
bool valid_zone(std::string_view zone, std::string& why);

// Both return false with a one-line reason in `err` (naming the field and the bad value) for
// anything not a well-formed EndpointSlice list / watch event; `out` is then unspecified. JSON is
// read by parse_json (json.h: depth 32). Never throw.
//
// A slice (discovery.k8s.io/v1): metadata.name required; addressType "IPv4" or "IPv6" ("FQDN"
// parses but yields no endpoints; any other value is an error); the port is the entry of `ports`
// named "https", else the only entry, else none; a chosen port without a number or with a protocol
// other than TCP yields no endpoints, one outside 1..65535 is an error. Each endpoint:
// addresses[0], an IP literal of the slice's family (else an error), skipped when
// conditions.ready == false or conditions.terminating == true. Its `zone` (absent or null: none)
// is kept when valid_zone() passes; any other value (not a string, too long, other characters) is
// recorded in zone_errors and never fails the slice. More than kMaxSliceEndpoints
// endpoints in one slice, or more than kMaxSlices items in a list, is an error.
// The list needs metadata.resourceVersion and items (null: none); a watch event needs the object's resourceVersion
// (except ERROR, whose object is a Status: code, message). A resourceVersion, wherever present (the
// items' too), must pass valid_resource_version(), else the list or event is an error.
bool parse_slice_list(std::string_view body, SliceList& out, std::string& err);
bool parse_watch_event(std::string_view line, WatchEvent& out, std::string& err);

}  // namespace kprism
