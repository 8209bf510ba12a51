// SPDX-License-Identifier: Apache-2.0
// Readiness probes: scheduling with jitter, the connect -> TLS -> request -> response phases (or
// the request alone on the kept connection), and turning each outcome into one of the result classes.
#include "kprism/upstreams/health_check.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/upstreams/control_plane.h"
#include "kprism/upstreams/tls_client.h"
#include "kprism/upstreams/tls_context.h"
#include "kprism/base/version.h"

namespace kprism {

namespace {

int ex_index() {
    static int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return idx;
}

// TLS alerts a server sends when it does not accept our client certificate.
bool client_cert_rejected(int reason) {
    switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        return true;
    default:
        return false;
    }
}

}  // namespace

HealthChecker::HealthChecker(ControlPlane& cp, Upstream& u) : cp_(cp), up_(u) {}

HealthChecker::~HealthChecker() {
    if (ssl_) SSL_free(ssl_);
    if (session_) SSL_SESSION_free(session_);
}

void HealthChecker::start(uint64_t first_delay_ms) {
    uv_timer_init(cp_.loop(), &timer_);
    uv_timer_init(cp_.loop(), &deadline_);
    timer_.data = deadline_.data = this;
    handles_open_ = true;
    uv_timer_start(&timer_, on_timer, first_delay_ms, 0);
}

void HealthChecker::close() {
    if (!handles_open_) return;
    handles_open_ = false;
    timers_closing_ = 2;
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_timer_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&deadline_), on_timer_closed);
    if (tcp_open_) {
        tcp_open_ = false;
        tcp_closing_ = true;
        uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_tcp_closed);
    }
    begin_when_closed_ = false;
}

void HealthChecker::check_soon(bool defer, bool new_connection) {
    if (new_connection) want_new_ = true;
    if (!handles_open_ || phase_ != Phase::idle) return;
    uint64_t now = uv_now(cp_.loop());
    uint64_t wait = 0;
    if (probes_ > 0 && now - started_ms_ < kMinGapMs) {
        if (!defer) return;
        wait = kMinGapMs - (now - started_ms_);
        if (uv_timer_get_due_in(&timer_) <= wait) return;  // already due by then
    }
    uv_timer_start(&timer_, on_timer, wait, 0);  // from the loop, not from the caller's stack
}

void HealthChecker::on_timer(uv_timer_t* t) { static_cast<HealthChecker*>(t->data)->begin(); }

void HealthChecker::begin() {
    if (!handles_open_ || phase_ != Phase::idle) return;
    if (tcp_closing_) {
        begin_when_closed_ = true;
        return;
    }
    uint64_t now = uv_now(cp_.loop());
    SSL_CTX* ctx = cp_.refresh_tls(now);
    TlsClientContext& tls = cp_.tls();
    if (kept_ && (!ctx || !up_.resolved || !reuse_allowed(now, tls.generation()))) {
        close_connection(true);
        begin_when_closed_ = true;  // a new connection once this one's handle is closed
        return;
    }
    if (kept_) {
        // What the socket received since the loop last read it (this timer can run before the
        // poll that would): read now, as between probes. Data or the end closes the connection,
        // and on_idle_read schedules the probe on a new one.
        read_idle_socket();
        if (!kept_) return;
        // Anything that arrived between probes and was not read yet (part of a record) would be
        // taken for the next answer.
        if (const char* left = buffered_leftover(false)) {
            protocol_error(left, nullptr);
            close_connection(true);
            begin_when_closed_ = true;
            return;
        }
    }
    started_ms_ = now;
    ++probes_;
    rest_ = Rest::nothing;
    rest_why_ = nullptr;
    if (kept_) {
        reused_ = true;
        ++up_.probes_reused;
        parser_ = HttpResponseParser(kProbeResponseMax, kReadyzBodyMax, HttpResponseParser::Body::excerpt, true);
        phase_ = Phase::awaiting_response;
        connect_started_ns_ = uv_hrtime();
        uv_timer_start(&deadline_, on_deadline, static_cast<uint64_t>(cp_.config().s.health_timeout.count()), 0);
        send_request();
        flush();
        return;
    }
    reused_ = false;
    want_new_ = false;
    if (!ctx || !up_.resolved) {
        // Nothing to check with (kubelet TLS bootstrap) or no address yet: the upstream stays
        // as it is and the selection fails open. Look again at the fast interval.
        uv_timer_start(&timer_, on_timer, static_cast<uint64_t>(cp_.config().s.health_fast_interval.count()), 0);
        return;
    }
    if (tls.generation() != session_generation_) {  // new certificate: never resume the old identity
        if (session_) SSL_SESSION_free(session_);
        session_ = nullptr;
        session_generation_ = tls.generation();
    }
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    parser_ = HttpResponseParser(kProbeResponseMax, kReadyzBodyMax, HttpResponseParser::Body::excerpt,
                                 cp_.config().s.health_new_connection_interval.count() > 0);
    conn_opened_ms_ = now;
    conn_generation_ = tls.generation();
    int r = uv_tcp_init_ex(cp_.loop(), &tcp_, up_.sa.ss_family);
    if (r != 0) {
        log::warn("cannot create health check socket", {{"upstream", up_.name}, {"error", uv_strerror(r)}});
        schedule_next();
        return;
    }
    tcp_.data = this;
    tcp_open_ = true;
    uv_tcp_nodelay(&tcp_, 1);
    phase_ = Phase::connecting;
    creq_.data = this;
    connect_started_ns_ = uv_hrtime();
    uv_timer_start(&deadline_, on_deadline, static_cast<uint64_t>(cp_.config().s.health_timeout.count()), 0);
    r = uv_tcp_connect(&creq_, &tcp_, as_sockaddr(up_.sa), on_connect);
    if (r != 0) finish(CheckResult::connect_failed, uv_strerror(r));
}

void HealthChecker::on_connect(uv_connect_t* req, int status) {
    auto* self = static_cast<HealthChecker*>(req->data);
    if (status == UV_ECANCELED || self->phase_ != Phase::connecting) return;
    if (status != 0) {
        self->finish(CheckResult::connect_failed, uv_strerror(status));
        return;
    }
    SSL* ssl = SSL_new(self->cp_.tls().get());
    self->ssl_ = ssl;
    self->rbio_ = BIO_new(BIO_s_mem());
    self->wbio_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(self->rbio_, -1);  // "no data yet", until the socket reaches EOF
    SSL_set_bio(ssl, self->rbio_, self->wbio_);
    SSL_set_connect_state(ssl);
    SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);  // a kept connection holds no record buffers while idle
    SSL_set_ex_data(ssl, ex_index(), self);
    const Upstream& u = self->up_;
    const std::string& name = u.tls_name();
    sockaddr_storage tmp;
    if (ip_to_sockaddr(name, 0, tmp)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
        SSL_set_tlsext_host_name(ssl, name.c_str());
        SSL_set1_host(ssl, name.c_str());
    }
    if (self->session_ && self->cp_.config().s.health_tls_resumption) SSL_set_session(ssl, self->session_);
    self->phase_ = Phase::handshaking;
    uv_read_start(reinterpret_cast<uv_stream_t*>(&self->tcp_), on_alloc, on_read);
    self->drive();
}

int HealthChecker::on_new_session(SSL* ssl, SSL_SESSION* sess) {
    auto* self = static_cast<HealthChecker*>(SSL_get_ex_data(ssl, ex_index()));
    if (!self || !SSL_SESSION_is_resumable(sess)) return 0;
    if (self->session_) SSL_SESSION_free(self->session_);
    self->session_ = sess;  // we keep the reference OpenSSL hands us
    return 1;
}

std::string HealthChecker::request() const {
    const bool keep = cp_.config().s.health_new_connection_interval.count() > 0;
    return fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: application/json, */*\r\n{}\r\n",
                       cp_.config().s.health_path, up_.host_header(), kUserAgent, keep ? "" : "Connection: close\r\n");
}

void HealthChecker::send_request() {
    std::string req = request();
    SSL_write(ssl_, req.data(), static_cast<int>(req.size()));  // memory BIO: never partial
}

// The kept connection serves the next probe while it presents the current certificate and is
// younger than health.new_connection_interval, and no passive signal asked for a new one.
bool HealthChecker::reuse_allowed(uint64_t now, uint64_t generation) const {
    const auto every = static_cast<uint64_t>(cp_.config().s.health_new_connection_interval.count());
    return every > 0 && !want_new_ && generation == conn_generation_ && now - conn_opened_ms_ < every;
}

// Ends the probe connection. `ended_well`: it carried a complete answer (or sat idle), so the TLS
// session stays resumable although no close_notify is sent.
void HealthChecker::close_connection(bool ended_well) {
    kept_ = false;
    up_.probe_local_port = 0;
    if (ssl_) {
        if (ended_well) SSL_set_shutdown(ssl_, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
        SSL_free(ssl_);  // frees both BIOs; a session OpenSSL handed us stays in session_
        ssl_ = nullptr;
        rbio_ = wbio_ = nullptr;
    }
    if (tcp_open_) {
        tcp_open_ = false;
        tcp_closing_ = true;
        uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_tcp_closed);
    }
}

// Between probes the kept connection should stay silent. The apiserver ending it (an idle
// timeout, a graceful shutdown, a restart) is a signal: a probe on a new connection follows, at a
// random moment within fast_interval so that the nodes an apiserver dropped at once do not all
// come back in the same instant. TLS records that carry no data (session tickets) are fine.
// Data between probes (an answer nobody asked for, or garbage) is the apiserver's protocol error:
// the connection is closed before a probe could take it for its answer.
void HealthChecker::on_idle_read(ssize_t n) {
    const char* why = nullptr;
    bool extra = false;
    if (n > 0) {
        BIO_write(rbio_, rbuf_.get(), static_cast<int>(n));
        char buf[512];
        ERR_clear_error();
        int r = SSL_read(ssl_, buf, sizeof buf);
        int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
        if (r > 0) why = "data between probes";
        else if (e == SSL_ERROR_ZERO_RETURN) why = "closed by the apiserver (close_notify)";
        else if (e != SSL_ERROR_WANT_READ) why = "TLS error between probes";
        extra = r > 0 || (why && e != SSL_ERROR_ZERO_RETURN);
        flush();
        ERR_clear_error();
        if (!why) return;
    } else {
        why = n == UV_EOF ? "closed by the apiserver" : uv_strerror(static_cast<int>(n));
    }
    if (extra) {
        protocol_error(why, nullptr);
    } else {
        ++up_.probe_connections_ended;
        KPRISM_DEBUG("probe connection ended", {{"upstream", up_.name}, {"reason", why}});
    }
    close_connection(n > 0 || n == UV_EOF);
    want_new_ = true;
    const auto fast = static_cast<uint64_t>(cp_.config().s.health_fast_interval.count());
    uint64_t wait = random_below(fast + 1);
    const auto* th = reinterpret_cast<const uv_handle_t*>(&timer_);
    if (handles_open_ && (!uv_is_active(th) || uv_timer_get_due_in(&timer_) > wait))
        uv_timer_start(&timer_, on_timer, wait, 0);
}

// The kept connection's socket, read to EAGAIN without waiting, each read as libuv would hand it
// to on_idle_read (which may close the connection: then it stops).
void HealthChecker::read_idle_socket() {
    uv_os_fd_t fd;
    if (!tcp_open_ || uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return;
    if (!rbuf_) rbuf_ = std::make_unique<char[]>(kReadBufSize);
    while (kept_) {
        ssize_t n = ::recv(fd, rbuf_.get(), kReadBufSize, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        on_idle_read(n > 0 ? n : n == 0 ? UV_EOF : uv_translate_sys_error(errno));
        if (n <= 0) return;
    }
}

// On the kept connection: did the apiserver's kernel acknowledge every byte of the request?
bool HealthChecker::request_acknowledged() const {
    if (!tcp_open_ || tcp_.write_queue_size > 0) return false;
    uv_os_fd_t fd;
    if (uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd) != 0) return false;
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return false;
    return ti.tcpi_unacked == 0;
}

// Bytes OpenSSL holds that no answer took: decrypted data not read yet, a record or part of one
// in its buffer or in the read BIO. nullptr: none.
const char* HealthChecker::buffered_leftover(bool after_answer) const {
    if (SSL_pending(ssl_) > 0) return after_answer ? "data after the answer" : "data between probes";
    if (SSL_has_pending(ssl_) || BIO_ctrl_pending(rbio_) > 0)
        return after_answer ? "part of a TLS record after the answer" : "part of a TLS record between probes";
    return nullptr;
}

// After an answer whose end the parser knows: what follows it in what the socket gave so far.
// Records already received are read now (the next probe's read would otherwise take them for its
// answer): application data, or anything but a close_notify or another complete record that
// carries none (a session ticket, a key update), is Rest::extra. The socket's EOF cannot be among
// them: libuv reports it in a read of its own, which finds the probe over (on_idle_read).
HealthChecker::Rest HealthChecker::rest_after_answer() {
    if (parser_.trailing() || SSL_pending(ssl_) > 0) {
        rest_why_ = "data after the answer";
        return Rest::extra;
    }
    Rest rest = Rest::nothing;
    char buf[512];
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(ssl_, buf, sizeof buf);
        if (n > 0) {
            rest_why_ = "data after the answer";
            rest = Rest::extra;
            break;
        }
        int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
            rest = Rest::closed;
            break;
        }
        rest_why_ = "TLS error after the answer";
        rest = Rest::extra;
        break;
    }
    ERR_clear_error();
    flush();  // a key update's answer, say
    if (rest == Rest::nothing && (rest_why_ = buffered_leftover(true))) rest = Rest::extra;
    return rest;
}

// The apiserver sent what no probe asked for: counted, and logged at most once a second per
// upstream (`suppressed` says how many were not). The caller closes the connection.
void HealthChecker::protocol_error(const char* what, const char* answer) {
    ++up_.probe_protocol_errors;
    if (auto n = protocol_log_.take(uv_now(cp_.loop()))) {
        if (answer)
            log::warn("probe connection closed on a protocol error",
                      {{"upstream", up_.name}, {"reason", what}, {"answer", answer}, {"suppressed", *n}});
        else
            log::warn("probe connection closed on a protocol error",
                      {{"upstream", up_.name}, {"reason", what}, {"suppressed", *n}});
    }
}

// One step of the TLS client: handshake, then the request, then the response; whatever OpenSSL
// wants to send is flushed to the socket.
void HealthChecker::drive() {
    if (phase_ == Phase::handshaking) {
        ERR_clear_error();
        int r = SSL_do_handshake(ssl_);
        if (r != 1) {
            int e = SSL_get_error(ssl_, r);
            flush();
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) fail_tls("TLS handshake");
            return;
        }
        // Probe RTT: connect plus TLS handshake, the round trips a client pays before its request.
        cp_.upstreams().record_rtt(up_, static_cast<double>(uv_hrtime() - connect_started_ns_) / 1e6);
        if (SSL_session_reused(ssl_)) ++up_.resumed_handshakes;
        else ++up_.full_handshakes;
        phase_ = Phase::awaiting_response;
        send_request();
    }
    if (phase_ == Phase::awaiting_response) {
        char buf[4096];
        for (;;) {
            ERR_clear_error();
            int n = SSL_read(ssl_, buf, sizeof buf);
            if (n > 0) {
                if (parser_.feed(buf, static_cast<size_t>(n)) != HttpResponseParser::State::need_more) {
                    rest_ = parser_.ended() ? rest_after_answer() : Rest::nothing;
                    conclude();
                    return;
                }
                continue;
            }
            int e = SSL_get_error(ssl_, n);
            if (e == SSL_ERROR_WANT_READ) break;
            if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
                parser_.eof();
                conclude();
                return;
            }
            fail_tls("reading the response");
            return;
        }
    }
    flush();
}

void HealthChecker::flush() { write_bio_out(wbio_, reinterpret_cast<uv_stream_t*>(&tcp_)); }

void HealthChecker::on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
    auto* self = static_cast<HealthChecker*>(h->data);
    if (!self->rbuf_) self->rbuf_ = std::make_unique<char[]>(kReadBufSize);
    *buf = uv_buf_init(self->rbuf_.get(), kReadBufSize);
}

void HealthChecker::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) {
    auto* self = static_cast<HealthChecker*>(s->data);
    if (n == 0) return;
    if (self->phase_ == Phase::idle) {
        if (self->kept_) self->on_idle_read(n);
        return;
    }
    if (n > 0) {
        BIO_write(self->rbio_, self->rbuf_.get(), static_cast<int>(n));
    } else if (n == UV_EOF) {
        BIO_set_mem_eof_return(self->rbio_, 0);
    } else {
        self->finish(self->phase_ == Phase::handshaking ? CheckResult::tls_failed : CheckResult::not_ready,
                     fmt::format("connection error: {}", uv_strerror(static_cast<int>(n))));
        return;
    }
    self->drive();
    if (n == UV_EOF && self->phase_ == Phase::handshaking)
        self->finish(CheckResult::tls_failed, "connection closed during the TLS handshake");
}

void HealthChecker::fail_tls(const char* during) {
    long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) {
        finish(CheckResult::tls_failed,
               fmt::format("apiserver certificate not accepted: {}", X509_verify_cert_error_string(verify)));
        return;
    }
    unsigned long e = ERR_peek_last_error();
    if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL && client_cert_rejected(ERR_GET_REASON(e))) {
        std::string why = ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "alert";
        ERR_clear_error();
        finish(CheckResult::unauthorized, fmt::format("apiserver rejected the client certificate ({})", why));
        return;
    }
    std::string err = openssl_error();
    if (e == 0) err = "connection closed";
    finish(CheckResult::tls_failed, fmt::format("{} failed: {}", during, err));
}

void HealthChecker::conclude() {
    if (parser_.state() == HttpResponseParser::State::error) {
        finish(CheckResult::not_ready, fmt::format("bad response: {}", parser_.error()));
        return;
    }
    int code = parser_.status();
    if (code == 200) {
        finish(CheckResult::ready, "");
        return;
    }
    std::string body = parser_.body_excerpt();
    if (body.size() > 200) body.resize(200);
    std::string err = body.empty() ? fmt::format("HTTP {}", code) : fmt::format("HTTP {}: {}", code, body);
    if (code == 401 || code == 403) {
        finish(CheckResult::unauthorized, err);
        return;
    }
    // kube-apiserver names its failing checks ("[-]etcd failed: reason withheld"); any other
    // body yields none. At most kReadyzBodyMax bytes of it were read.
    finish(CheckResult::not_ready, err, code >= 500, parse_readyz_body(parser_.body()));
}

void HealthChecker::on_deadline(uv_timer_t* t) {
    auto* self = static_cast<HealthChecker*>(t->data);
    // On the kept connection a request the apiserver's kernel acknowledged and nobody answered is
    // the same sign as a connect without a handshake; one not even acknowledged is like a connect
    // timeout (a blackhole).
    const bool delivered = self->reused_ && self->request_acknowledged();
    const char* what = self->phase_ == Phase::connecting    ? "no TCP connect"
                       : self->phase_ == Phase::handshaking ? "no TLS handshake"
                       : !self->reused_                     ? "no response"
                       : delivered ? "no response on the kept connection (request acknowledged)"
                                   : "no response on the kept connection (request not acknowledged)";
    // Connected but no TLS handshake: the kernel accepts for a process that does not run (hung,
    // stopped, deadlocked). A live apiserver handshakes even when /readyz is slow, so this takes
    // the upstream down at once, like a 5xx; other timeouts count towards `fall`.
    const bool hung = self->phase_ == Phase::handshaking || delivered;
    self->finish(CheckResult::timeout,
                 fmt::format("{} within {}", what, format_duration(self->cp_.config().s.health_timeout)), hung);
}

void HealthChecker::finish(CheckResult r, std::string error, bool explicit_down, const FailingChecks& checks) {
    if (phase_ == Phase::idle) return;
    const bool phase_was_response = phase_ == Phase::awaiting_response && r != CheckResult::tls_failed &&
                                    r != CheckResult::timeout;
    // Past the handshake, the TLS session is sound however the request went (a timeout, say): it
    // stays resumable, or a struggling apiserver would get a full handshake from every node next.
    const bool session_sound = phase_ == Phase::awaiting_response && r != CheckResult::tls_failed;
    phase_ = Phase::idle;
    uv_timer_stop(&deadline_);
    // The kept connection ended before a byte of the answer (the apiserver closed it as the
    // request went out, say): not the apiserver's answer. The probe moves to a new connection,
    // once; its result is the probe's.
    if (reused_ && !retried_ && r != CheckResult::timeout && parser_.received() == 0) {
        KPRISM_DEBUG("probe connection ended before an answer; probing on a new one",
                     {{"upstream", up_.name}, {"error", error}});
        ++up_.probe_connections_ended;
        retried_ = true;
        --probes_;
        close_connection(session_sound);
        begin_when_closed_ = true;
        return;
    }
    retried_ = false;
    const Rest rest = phase_was_response ? rest_ : Rest::nothing;
    rest_ = Rest::nothing;
    // The answer counts however the connection goes on: it is the apiserver's answer to this
    // request (HTTP/1.1 answers in order; what follows it is not).
    if (rest == Rest::extra) protocol_error(rest_why_, result_name(r));
    // A complete answer on an HTTP/1.1 connection that may carry another, and nothing after it:
    // kept for the next probe.
    if (phase_was_response && parser_.reusable() && rest == Rest::nothing && ssl_ && tcp_open_ &&
        cp_.config().s.health_new_connection_interval.count() > 0) {
        kept_ = true;
        sockaddr_storage local{};
        int len = sizeof local;
        if (up_.probe_local_port == 0 &&
            uv_tcp_getsockname(&tcp_, reinterpret_cast<sockaddr*>(&local), &len) == 0)
            up_.probe_local_port = ntohs(local.ss_family == AF_INET6
                                             ? reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port
                                             : reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    } else {
        // A close_notify with an answer that would have kept the connection: the apiserver ended
        // it, gracefully (the session stays resumable). The next probe opens a new one when due.
        if (rest == Rest::closed && parser_.reusable()) {
            ++up_.probe_connections_ended;
            KPRISM_DEBUG("probe connection ended",
                         {{"upstream", up_.name}, {"reason", "closed by the apiserver with its answer (close_notify)"}});
        }
        close_connection(session_sound);
    }
    rest_why_ = nullptr;
    reused_ = false;
    KPRISM_DEBUG("health check", {{"upstream", up_.name}, {"result", result_name(r)}, {"error", error}});
    // From the connect (the request, on the kept connection), when the deadline started: the time
    // health.timeout bounds.
    up_.check_duration.observe(static_cast<double>(uv_hrtime() - connect_started_ns_) / 1e9);
    cp_.record_check(up_, r, error, explicit_down, session_generation_, checks);
    schedule_next();
}

void HealthChecker::on_tcp_closed(uv_handle_t* h) {
    auto* self = static_cast<HealthChecker*>(h->data);
    self->tcp_closing_ = false;
    self->rbuf_.reset();
    if (self->begin_when_closed_) {
        self->begin_when_closed_ = false;
        self->begin();
        return;
    }
    self->after_handle_closed();
}

void HealthChecker::on_timer_closed(uv_handle_t* h) {
    auto* self = static_cast<HealthChecker*>(h->data);
    --self->timers_closing_;
    self->after_handle_closed();
}

// Last: `this` may be freed by the call.
void HealthChecker::after_handle_closed() {
    if (closed()) cp_.checker_closed(this);
}

// Start-to-start period: the interval, or the fast interval while the verdict is in flux, scaled
// by a random factor in [0.8, 1.0] ([0.5, 1.0] while down) so thousands of nodes drift apart and
// never exceed it.
void HealthChecker::schedule_next() {
    if (!handles_open_) return;
    const Settings& s = cp_.config().s;
    // While every apiserver rejects the certificate an unknown upstream stays unknown: that is no
    // verdict in flux, and probing at the fast interval would only add rejected handshakes.
    bool fast = (up_.health == Health::unknown && cp_.credentials() != CredentialsState::rejected) ||
                (up_.health == Health::up && up_.falls > 0) || (up_.health == Health::down && up_.rises > 0);
    uint64_t period = static_cast<uint64_t>((fast ? s.health_fast_interval : s.health_interval).count());
    // A down upstream's probes spread wider (half the period): the nodes that lost it at the same
    // moment should not all find it back in the same one (its first handshakes are full ones).
    const bool spread = up_.health == Health::down && up_.rises == 0;
    period = period - random_below(period / (spread ? 2 : 5) + 1);
    uint64_t elapsed = uv_now(cp_.loop()) - started_ms_;
    uv_timer_start(&timer_, on_timer, period > elapsed ? period - elapsed : 0, 0);
}

}  // namespace kprism
