// SPDX-License-Identifier: Apache-2.0
// Name resolution on the libuv loop with c-ares: a hostname to its IPv4 and IPv6 addresses,
// /etc/hosts then DNS as c-ares reads /etc/resolv.conf, bounded in addresses and in time.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct ares_addrinfo;  // <ares.h>, included by resolver.cc only

namespace kprism {

// Why a resolution gave no address.
enum class ResolveError {
    none,
    no_such_name,  // NXDOMAIN (or absent from /etc/hosts and every search domain)
    no_address,    // the name exists but has no A or AAAA record (NODATA)
    timeout,       // no answer within Resolver::Options::timeout_ms
    failed,        // SERVFAIL, REFUSED, a malformed answer, no server reachable, ...
};
const char* resolve_error_name(ResolveError e);  // "no_such_name", ...

struct ResolveResult {
    ResolveError error = ResolveError::none;
    std::string detail;  // c-ares's text for the error; empty when none
    // Distinct addresses (port 0), IPv4 before IPv6, each family in byte order; at most
    // Options::max_addresses of them: the first in that order.
    std::vector<sockaddr_storage> addresses;
    size_t total = 0;  // distinct addresses in the answer, before the cap
};

// Owned by its user (the ControlPlane), on one loop. Each resolution has its own c-ares channel,
// made when it starts (so /etc/resolv.conf is read again each time, and nothing at all while no
// hostname is resolved), with its own timer and one uv_poll_t per socket c-ares opens; those
// handles are freed from their close callbacks, and the resolution with the last of them.
// close() cancels every resolution; the Resolver may be destroyed once the loop has run their
// close callbacks (after the loop has stopped).
class Resolver {
public:
    struct Options {
        // The whole resolution: every server, try and record type. c-ares's own per-try timeout
        // is a quarter of it (at least 100 ms), doubled on each round of retries.
        uint64_t timeout_ms = 5000;
        size_t max_addresses = 16;
        // "ip[:port],..." asked instead of resolv.conf's nameserver lines (tests); empty: those.
        std::string servers;
    };
    using Callback = std::function<void(const ResolveResult&)>;

    Resolver(uv_loop_t* loop, Options opts);
    ~Resolver();
    Resolver(const Resolver&) = delete;
    Resolver& operator=(const Resolver&) = delete;

    // Starts resolving `host` (a hostname, not an IP literal). `done` is called once, from a
    // callback of the loop (never from within this call), unless cancel() or close() comes first.
    // Returns the resolution's id (never 0); 0 when it could not start (then `error` says why and
    // `done` is never called).
    uint64_t resolve(const std::string& host, Callback done, std::string& error);
    // `done` of resolution `id` is never called; its handles close. Unknown ids are ignored.
    void cancel(uint64_t id);
    // Cancels every resolution; resolve() fails after this. Idempotent.
    void close();
    // Resolutions not yet freed (including those whose handles are closing).
    size_t allocated() const { return queries_.size(); }

private:
    struct Query;
    static void on_sock_state(void* data, int fd, int readable, int writable);
    static void on_addrinfo(void* arg, int status, int timeouts, ::ares_addrinfo* res);
    static void on_poll(uv_poll_t* p, int status, int events);
    static void on_timer(uv_timer_t* t);
    static void on_poll_closed(uv_handle_t* h);
    static void on_timer_closed(uv_handle_t* h);
    void arm(Query& q);
    void finish(Query& q);
    void shut(Query& q);
    void handle_closed(Query& q);

    uv_loop_t* loop_;
    Options opts_;
    bool closed_ = false;
    uint64_t next_id_ = 1;
    std::vector<std::unique_ptr<Query>> queries_;
};

}  // namespace kprism
