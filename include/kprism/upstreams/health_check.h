// SPDX-License-Identifier: Apache-2.0
// The readiness probe of one upstream: TCP connect, TLS with the kubelet's client certificate
// (OpenSSL over memory BIOs, socket I/O on the libuv loop), GET /readyz, classified result.
#pragma once

#include <openssl/ssl.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kprism/base/log_limiter.h"
#include "kprism/upstreams/http_response.h"
#include "kprism/upstreams/readyz_body.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

class ControlPlane;

// What a probe keeps of a response, headers and body (a /readyz body past kReadyzBodyMax bytes
// is not read at all).
constexpr size_t kProbeResponseMax = 16384;

// Owned by the ControlPlane (one per upstream). Its handles are closed by close(); the close
// callback of the last one hands it back to the ControlPlane (ControlPlane::checker_closed), which
// frees it then (a removed upstream's checker), or with itself after the loop has stopped. Probes reuse one kept connection
// (HTTP/1.1 keep-alive: a probe costs the apiserver a request, not a handshake) and open a new one
// at least every health.new_connection_interval, after a passive signal, and whenever the kept one
// ended, so that a firewall that drops new connections still shows up; TLS sessions are resumed.
// A connection is kept only when nothing at all follows the answer: no byte past it in the HTTP
// parser, no record or part of one in OpenSSL or its read BIO, no close_notify, no EOF. Anything
// else is the apiserver's protocol error: the answer still counts, the connection is closed.
class HealthChecker {
public:
    HealthChecker(ControlPlane& cp, Upstream& u);
    ~HealthChecker();
    HealthChecker(const HealthChecker&) = delete;
    HealthChecker& operator=(const HealthChecker&) = delete;

    void start(uint64_t first_delay_ms);
    // A passive signal suggests the upstream is sick: probe now unless one is running or the last
    // one started under kMinGapMs ago. `defer`: then as soon as kMinGapMs have passed instead
    // (a fresh result is wanted, not just a hint given). `new_connection`: the next probe opens a
    // new connection (what a client would), whenever it runs.
    void check_soon(bool defer = false, bool new_connection = true);
    static constexpr uint64_t kMinGapMs = 250;
    void close();
    // close() was called and every handle's close callback has run: nothing refers to it any more.
    bool closed() const { return !handles_open_ && timers_closing_ == 0 && !tcp_open_ && !tcp_closing_; }

    // For the SSL_CTX new-session callback.
    static int on_new_session(SSL* ssl, SSL_SESSION* sess);

private:
    enum class Phase { idle, connecting, handshaking, awaiting_response };
    // What the connection held after a complete answer (rest_after_answer()).
    enum class Rest { nothing, closed, extra };

    void begin();
    void send_request();
    bool reuse_allowed(uint64_t now, uint64_t generation) const;
    void close_connection(bool ended_well);
    void on_idle_read(ssize_t n);
    void read_idle_socket();
    bool request_acknowledged() const;
    Rest rest_after_answer();
    const char* buffered_leftover(bool after_answer) const;
    void protocol_error(const char* what, const char* answer);
    void drive();
    void flush();
    void conclude();
    void fail_tls(const char* during);
    void finish(CheckResult r, std::string error, bool explicit_down = false, const FailingChecks& checks = {});
    void schedule_next();
    std::string request() const;

    static void on_timer(uv_timer_t* t);
    static void on_deadline(uv_timer_t* t);
    static void on_connect(uv_connect_t* req, int status);
    static void on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf);
    static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*);
    static void on_tcp_closed(uv_handle_t* h);
    static void on_timer_closed(uv_handle_t* h);
    // From a close callback: when it was the last handle after close(), the ControlPlane frees it.
    void after_handle_closed();

    ControlPlane& cp_;
    Upstream& up_;
    uv_timer_t timer_{};     // next probe
    uv_timer_t deadline_{};  // timeout of the running probe
    uv_tcp_t tcp_{};
    uv_connect_t creq_{};
    bool handles_open_ = false;
    int timers_closing_ = 0;    // timer_ and deadline_: uv_close called, callback pending
    bool tcp_open_ = false;     // initialised and not yet closed
    bool tcp_closing_ = false;  // uv_close called, callback pending
    bool begin_when_closed_ = false;
    Phase phase_ = Phase::idle;
    SSL* ssl_ = nullptr;
    BIO* rbio_ = nullptr;  // network -> OpenSSL (owned by ssl_)
    BIO* wbio_ = nullptr;  // OpenSSL -> network (owned by ssl_)
    SSL_SESSION* session_ = nullptr;
    uint64_t session_generation_ = 0;
    // The kept connection: open and idle between probes (ssl_ and tcp_ live, reading).
    bool kept_ = false;
    bool reused_ = false;    // the running probe is on the kept connection
    bool retried_ = false;   // ... and found it closed, so it moved to a new one once
    bool want_new_ = false;  // the next probe opens a new connection (a passive signal)
    uint64_t conn_opened_ms_ = 0;
    uint64_t conn_generation_ = 0;  // the client certificate the connection presented
    HttpResponseParser parser_{kProbeResponseMax, kReadyzBodyMax};
    // After the running probe's answer, when the parser knows where it ended.
    Rest rest_ = Rest::nothing;
    const char* rest_why_ = nullptr;  // Rest::extra: what was there
    LogLimiter protocol_log_;
    uint64_t started_ms_ = 0;
    uint64_t connect_started_ns_ = 0;
    uint64_t probes_ = 0;
    // The socket's read buffer, only while a probe connection is open (a checker between
    // connections, or one of a removed upstream waiting for its close callbacks, holds none).
    static constexpr size_t kReadBufSize = 16384;
    std::unique_ptr<char[]> rbuf_;
};

}  // namespace kprism
