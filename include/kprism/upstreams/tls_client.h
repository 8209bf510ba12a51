// SPDX-License-Identifier: Apache-2.0
// One HTTPS request as a client of an apiserver: TCP connect, TLS with the kubelet's client
// certificate (OpenSSL over memory BIOs), the request written, the response's bytes handed out as
// they arrive. Discovery's list and watch each use one.
#pragma once

#include <openssl/ssl.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace kprism {

// Writes what OpenSSL left in a memory BIO to the socket (each piece its own uv_write, freed by
// its callback). The readiness probes and TlsClient share it.
void write_bio_out(BIO* wbio, uv_stream_t* to);

class TlsClient {
public:
    class Handler {
    public:
        virtual ~Handler() = default;
        // Decrypted response bytes. Returning false ends the request (on_end is not called then).
        virtual bool on_data(std::string_view bytes) = 0;
        // The request is over: `clean` when the server closed after sending (EOF or close_notify),
        // else `why` says what failed ("connect: connection refused", "TLS handshake failed: ...",
        // "no TLS handshake within 3s", "no response within 10m30s").
        virtual void on_end(bool clean, const std::string& why) = 0;
    };

    // Starts the request; the client owns itself from here and frees itself from its handles'
    // close callbacks. `handshake_timeout_ms` bounds connect and handshake, `total_timeout_ms` the
    // whole request. `tls_name` is verified in the server's certificate (an IP, or a DNS name also
    // sent as SNI). Handler callbacks come from the loop, never from inside start().
    static TlsClient* start(uv_loop_t* loop, SSL_CTX* ctx, const sockaddr_storage& to, const std::string& tls_name,
                            std::string request, Handler* handler, uint64_t handshake_timeout_ms,
                            uint64_t total_timeout_ms);
    // Ends the request now; no handler callback follows.
    void abort();

private:
    TlsClient() = default;
    ~TlsClient();
    void end(bool clean, std::string why);
    void drive();
    void flush();
    std::string tls_failure(const char* during);
    static void on_connect(uv_connect_t* req, int status);
    static void on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf);
    static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t*);
    static void on_timer(uv_timer_t* t);
    static void on_closed(uv_handle_t* h);

    Handler* handler_ = nullptr;
    uv_tcp_t tcp_{};
    uv_timer_t timer_{};
    uv_connect_t creq_{};
    int open_handles_ = 0;
    bool ending_ = false;
    bool handshaken_ = false;
    uint64_t total_deadline_ms_ = 0;
    uint64_t total_timeout_ms_ = 0;
    uint64_t handshake_timeout_ms_ = 0;
    SSL* ssl_ = nullptr;
    BIO* rbio_ = nullptr;
    BIO* wbio_ = nullptr;
    std::string request_;
    std::string tls_name_;
    SSL_CTX* ctx_ = nullptr;
    char rbuf_[16384];
};

}  // namespace kprism
