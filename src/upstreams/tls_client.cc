// SPDX-License-Identifier: Apache-2.0
// One HTTPS request to an apiserver over OpenSSL memory BIOs on the libuv loop (discovery's list
// and watch): connect, handshake, request, the response's bytes as they arrive, one end.
#include "kprism/upstreams/tls_client.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "kprism/base/address.h"
#include "kprism/base/duration.h"
#include "kprism/upstreams/tls_context.h"

namespace kprism {

namespace {

struct WriteReq {
    uv_write_t req;
    std::string data;
};

}  // namespace

TlsClient* TlsClient::start(uv_loop_t* loop, SSL_CTX* ctx, const sockaddr_storage& to, const std::string& tls_name,
                            std::string request, Handler* handler, uint64_t handshake_timeout_ms,
                            uint64_t total_timeout_ms) {
    auto* c = new TlsClient;
    c->handler_ = handler;
    c->request_ = std::move(request);
    c->tls_name_ = tls_name;
    c->ctx_ = ctx;
    SSL_CTX_up_ref(ctx);  // a reload may replace the context while this request runs
    c->handshake_timeout_ms_ = handshake_timeout_ms;
    c->total_timeout_ms_ = total_timeout_ms;
    c->total_deadline_ms_ = uv_now(loop) + total_timeout_ms;
    uv_timer_init(loop, &c->timer_);
    c->timer_.data = c;
    ++c->open_handles_;
    uv_timer_start(&c->timer_, on_timer, handshake_timeout_ms, 0);
    int r = uv_tcp_init_ex(loop, &c->tcp_, to.ss_family);
    if (r == 0) {
        c->tcp_.data = c;
        ++c->open_handles_;
        uv_tcp_nodelay(&c->tcp_, 1);
        c->creq_.data = c;
        r = uv_tcp_connect(&c->creq_, &c->tcp_, as_sockaddr(to), on_connect);
    }
    if (r != 0) {
        // Reported from the loop (a zero timer), never from inside start().
        c->ending_ = false;
        c->handshake_timeout_ms_ = 0;
        c->request_ = fmt::format("connect: {}", uv_strerror(r));
        c->total_deadline_ms_ = 0;
        uv_timer_start(&c->timer_, on_timer, 0, 0);
    }
    return c;
}

TlsClient::~TlsClient() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
}

void TlsClient::abort() {
    handler_ = nullptr;
    end(false, "");
}

void TlsClient::end(bool clean, std::string why) {
    if (ending_) return;
    ending_ = true;
    Handler* h = handler_;
    handler_ = nullptr;
    uv_timer_stop(&timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), on_closed);
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&tcp_)) && tcp_.data == this)
        uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_closed);
    if (h) h->on_end(clean, why);
}

void TlsClient::on_closed(uv_handle_t* h) {
    auto* self = static_cast<TlsClient*>(h->data);
    if (--self->open_handles_ == 0) delete self;
}

void TlsClient::on_timer(uv_timer_t* t) {
    auto* self = static_cast<TlsClient*>(t->data);
    if (self->total_deadline_ms_ == 0) {  // start() could not even begin the connect
        self->end(false, self->request_);
        return;
    }
    if (!self->handshaken_)
        self->end(false, fmt::format("no TLS handshake within {}",
                                     format_duration(Duration{static_cast<int64_t>(self->handshake_timeout_ms_)})));
    else
        self->end(false, fmt::format("no end of the response within {}",
                                     format_duration(Duration{static_cast<int64_t>(self->total_timeout_ms_)})));
}

void TlsClient::on_connect(uv_connect_t* req, int status) {
    auto* self = static_cast<TlsClient*>(req->data);
    if (status == UV_ECANCELED || self->ending_) return;
    if (status != 0) {
        self->end(false, fmt::format("connect: {}", uv_strerror(status)));
        return;
    }
    self->ssl_ = SSL_new(self->ctx_);
    if (!self->ssl_) {
        self->end(false, "TLS: " + openssl_error());
        return;
    }
    self->rbio_ = BIO_new(BIO_s_mem());
    self->wbio_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(self->rbio_, -1);
    SSL_set_bio(self->ssl_, self->rbio_, self->wbio_);
    SSL_set_connect_state(self->ssl_);
    SSL_set_mode(self->ssl_, SSL_MODE_RELEASE_BUFFERS);  // an idle watch holds no record buffers
    sockaddr_storage tmp;
    if (ip_to_sockaddr(self->tls_name_, 0, tmp)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(self->ssl_), self->tls_name_.c_str());
    } else {
        SSL_set_tlsext_host_name(self->ssl_, self->tls_name_.c_str());
        SSL_set1_host(self->ssl_, self->tls_name_.c_str());
    }
    uv_read_start(reinterpret_cast<uv_stream_t*>(&self->tcp_), on_alloc, on_read);
    self->drive();
}

std::string TlsClient::tls_failure(const char* during) {
    long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK)
        return fmt::format("apiserver certificate not accepted: {}", X509_verify_cert_error_string(verify));
    unsigned long e = ERR_peek_last_error();
    std::string err = e == 0 ? std::string("connection closed") : openssl_error();
    ERR_clear_error();
    return fmt::format("{} failed: {}", during, err);
}

void TlsClient::drive() {
    if (!handshaken_) {
        ERR_clear_error();
        int r = SSL_do_handshake(ssl_);
        if (r != 1) {
            int e = SSL_get_error(ssl_, r);
            flush();
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) end(false, tls_failure("TLS handshake"));
            return;
        }
        handshaken_ = true;
        uint64_t now = uv_now(tcp_.loop);
        uv_timer_start(&timer_, on_timer, total_deadline_ms_ > now ? total_deadline_ms_ - now : 0, 0);
        SSL_write(ssl_, request_.data(), static_cast<int>(request_.size()));  // memory BIO: never partial
        request_.clear();
        request_.shrink_to_fit();
    }
    char buf[16384];
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(ssl_, buf, sizeof buf);
        if (n > 0) {
            if (!handler_ || !handler_->on_data(std::string_view(buf, static_cast<size_t>(n)))) {
                handler_ = nullptr;
                end(false, "");
                return;
            }
            if (ending_) return;
            continue;
        }
        int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ) break;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
            end(true, "");
            return;
        }
        end(false, tls_failure("reading the response"));
        return;
    }
    flush();
}

void TlsClient::flush() { write_bio_out(wbio_, reinterpret_cast<uv_stream_t*>(&tcp_)); }

namespace {
void on_bio_written(uv_write_t* req, int) { delete static_cast<WriteReq*>(req->data); }
}  // namespace

void write_bio_out(BIO* wbio, uv_stream_t* to) {
    char buf[16384];
    for (;;) {
        int n = BIO_read(wbio, buf, sizeof buf);
        if (n <= 0) return;
        auto* w = new WriteReq;
        w->data.assign(buf, static_cast<size_t>(n));
        w->req.data = w;
        uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
        if (uv_write(&w->req, to, &b, 1, on_bio_written) != 0) {
            delete w;
            return;
        }
    }
}

void TlsClient::on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
    auto* self = static_cast<TlsClient*>(h->data);
    *buf = uv_buf_init(self->rbuf_, sizeof self->rbuf_);
}

void TlsClient::on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*) {
    auto* self = static_cast<TlsClient*>(s->data);
    if (n == 0 || self->ending_) return;
    if (n > 0) {
        BIO_write(self->rbio_, self->rbuf_, static_cast<int>(n));
    } else if (n == UV_EOF) {
        BIO_set_mem_eof_return(self->rbio_, 0);
    } else {
        self->end(false, fmt::format("connection error: {}", uv_strerror(static_cast<int>(n))));
        return;
    }
    self->drive();
    if (n == UV_EOF && !self->ending_)
        self->end(!self->handshaken_ ? false : true,
                  self->handshaken_ ? "" : "connection closed during the TLS handshake");
}

}  // namespace kprism
