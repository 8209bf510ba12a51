// SPDX-License-Identifier: Apache-2.0
// The TLS stand-in apiserver (build/kprism-standin --tls-cert ...) with a test PKI generated at
// test time: client-certificate auth, server name verification, session resumption and every
// --readyz-file answer, checked with curl and with a small blocking OpenSSL client.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

// ---- the stand-in ----

struct Standin : Process {
    explicit Standin(std::vector<std::string> args, const std::string& listen = "127.0.0.1:0")
        : Process(argv(std::move(args), listen)) {
        if (!wait_output("listening ")) throw std::runtime_error("standin did not start: " + output());
        std::string o = output();
        size_t l = o.find("listening ");
        size_t colon = o.rfind(':', o.find(" name=", l));
        port = std::atoi(o.c_str() + colon + 1);
    }
    static std::vector<std::string> argv(std::vector<std::string> args, const std::string& listen) {
        std::vector<std::string> a = {standin_bin(), "--listen", listen, "--name", "tls-one"};
        a.insert(a.end(), args.begin(), args.end());
        return a;
    }
    int port = 0;
};

std::vector<std::string> tls_args(const Pki& pki, bool client_auth = true, const std::string& readyz = "") {
    std::vector<std::string> a = {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key};
    if (client_auth) a.insert(a.end(), {"--client-ca", pki.ca_cert});
    if (!readyz.empty()) a.insert(a.end(), {"--readyz-file", readyz});
    return a;
}

// Replaces the file atomically so the stand-in never reads half of it.
void set_readyz(const std::string& path, const std::string& content) {
    {
        std::ofstream f(path + ".new", std::ios::trunc);
        f << content << "\n";
    }
    ASSERT_EQ(rename((path + ".new").c_str(), path.c_str()), 0);
}

// ---- curl ----

std::string curl_bin() {
    const char* path = getenv("PATH");
    std::string p = path ? path : "/usr/bin:/bin";
    for (size_t b = 0; b <= p.size();) {
        size_t e = p.find(':', b);
        if (e == std::string::npos) e = p.size();
        std::string c = p.substr(b, e - b) + "/curl";
        if (access(c.c_str(), X_OK) == 0) return c;
        b = e + 1;
    }
    return "/usr/bin/curl";
}

struct CurlReply {
    int code;       // curl's exit code
    int http = 0;   // HTTP status, 0 if none
    std::string output;
};

CurlReply curl(std::vector<std::string> args) {
    std::vector<std::string> a = {curl_bin(), "-sS", "--max-time", "5", "-w", "\nHTTP_CODE=%{http_code}\n"};
    a.insert(a.end(), args.begin(), args.end());
    Result r = run(a);
    CurlReply c{r.code, 0, r.output};
    if (size_t p = r.output.rfind("HTTP_CODE="); p != std::string::npos) c.http = std::atoi(r.output.c_str() + p + 10);
    return c;
}

std::string url(int port, const std::string& path = "/readyz", const std::string& host = "127.0.0.1") {
    return "https://" + host + ":" + std::to_string(port) + path;
}

// ---- a small blocking OpenSSL client ----

struct SslCtxFree {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SessionFree {
    void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
};
using Session = std::unique_ptr<SSL_SESSION, SessionFree>;

// OpenSSL writes to its socket with write(2): against a peer that has gone that raises SIGPIPE,
// which would kill the test binary. Blocks it in this thread for the scope and swallows one
// that became pending, leaving the process's disposition alone.
class NoSigpipe {
public:
    NoSigpipe() {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &s, &old_);
    }
    ~NoSigpipe() {
        sigset_t pending;
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) {
            sigset_t s;
            sigemptyset(&s);
            sigaddset(&s, SIGPIPE);
            timespec zero{0, 0};
            int saved = errno;
            sigtimedwait(&s, nullptr, &zero);
            errno = saved;
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    NoSigpipe(const NoSigpipe&) = delete;
    NoSigpipe& operator=(const NoSigpipe&) = delete;

private:
    sigset_t old_;
};

struct ClientOpts {
    std::string ca;         // trust anchors; empty: the server is not verified
    std::string cert, key;  // client certificate; key defaults to the cert file
    int max_version = 0;    // e.g. TLS1_2_VERSION
    int min_version = 0;
    bool no_ticket = false;  // TLS 1.2: resume by session id instead of ticket
};

class ClientCtx {
public:
    explicit ClientCtx(const ClientOpts& o) : ctx_(SSL_CTX_new(TLS_client_method())) {
        if (!ctx_) throw std::runtime_error("SSL_CTX_new");
        SSL_CTX* c = ctx_.get();
        if (o.min_version) {
            SSL_CTX_set_security_level(c, 0);  // let the client offer old versions at all
            SSL_CTX_set_min_proto_version(c, o.min_version);
        }
        if (o.max_version) SSL_CTX_set_max_proto_version(c, o.max_version);
        if (o.no_ticket) SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
        if (!o.ca.empty()) {
            if (SSL_CTX_load_verify_locations(c, o.ca.c_str(), nullptr) != 1) throw std::runtime_error("load ca");
            SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
        }
        if (!o.cert.empty()) {
            std::string key = o.key.empty() ? o.cert : o.key;
            if (SSL_CTX_use_certificate_chain_file(c, o.cert.c_str()) != 1 ||
                SSL_CTX_use_PrivateKey_file(c, key.c_str(), SSL_FILETYPE_PEM) != 1)
                throw std::runtime_error("load client cert " + o.cert);
        }
        SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT);
    }
    SSL_CTX* get() const { return ctx_.get(); }

private:
    std::unique_ptr<SSL_CTX, SslCtxFree> ctx_;
};

struct HttpReply {
    int status = 0;
    std::string head;
    std::string body;
};

class TlsClient {
public:
    // Connects and handshakes. `verify_host` is a DNS name or IP literal to check the server
    // certificate against (empty: chain only); a DNS name is also sent as SNI.
    TlsClient(const ClientCtx& ctx, int port, const std::string& verify_host = "", SSL_SESSION* resume = nullptr,
              bool ipv6 = false) {
        fd_ = connect_to(port, ipv6);
        if (fd_ < 0) {
            error = "connect failed";
            return;
        }
        set_timeout(5000ms);
        ssl_ = SSL_new(ctx.get());
        SSL_set_fd(ssl_, fd_);
        if (!verify_host.empty()) {
            X509_VERIFY_PARAM* vp = SSL_get0_param(ssl_);
            if (X509_VERIFY_PARAM_set1_ip_asc(vp, verify_host.c_str()) != 1) {
                SSL_set_tlsext_host_name(ssl_, verify_host.c_str());
                SSL_set1_host(ssl_, verify_host.c_str());
            }
        }
        if (resume) SSL_set_session(ssl_, resume);
        ERR_clear_error();
        NoSigpipe guard;
        int r = SSL_connect(ssl_);
        verify_result = SSL_get_verify_result(ssl_);
        if (r != 1) {
            error = ssl_error();
            broken_ = true;
            return;
        }
        handshake_ok = true;
        reused = SSL_session_reused(ssl_) == 1;
    }
    ~TlsClient() {
        if (ssl_) {
            if (handshake_ok && !broken_) {
                NoSigpipe guard;
                SSL_shutdown(ssl_);
            }
            SSL_free(ssl_);
        }
        if (fd_ >= 0) ::close(fd_);
    }
    TlsClient(const TlsClient&) = delete;
    TlsClient& operator=(const TlsClient&) = delete;

    bool handshake_ok = false;
    long verify_result = X509_V_OK;
    bool reused = false;
    std::string error;  // the last failure
    bool timed_out = false;
    bool eof = false;

    bool send(const std::string& s) {
        if (!handshake_ok) return false;
        ERR_clear_error();
        NoSigpipe guard;
        if (SSL_write(ssl_, s.data(), static_cast<int>(s.size())) != static_cast<int>(s.size())) {
            error = ssl_error();
            broken_ = true;
            return false;
        }
        return true;
    }
    bool get(const std::string& path, bool close = false) {
        return send("GET " + path + " HTTP/1.1\r\nHost: kubernetes\r\nUser-Agent: standin-tls-test\r\n" +
                    (close ? "Connection: close\r\n" : "") + "\r\n");
    }

    // Reads one response (head, then a Content-Length body of at most max_body bytes).
    bool read_response(HttpReply& out, std::chrono::milliseconds timeout = 5000ms, size_t max_body = 64u << 20) {
        out = {};
        set_timeout(timeout);
        size_t end;
        while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
            if (!fill()) return false;
        out.head = buf_.substr(0, end + 4);
        buf_.erase(0, end + 4);
        if (out.head.rfind("HTTP/1.", 0) == 0 && out.head.size() > 12) out.status = std::atoi(out.head.c_str() + 9);
        size_t want = 0;
        std::string lower = out.head;
        for (auto& c : lower) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
        if (size_t p = lower.find("\r\ncontent-length:"); p != std::string::npos)
            want = std::strtoull(lower.c_str() + p + 17, nullptr, 10);
        want = std::min(want, max_body);
        while (buf_.size() < want)
            if (!fill()) return false;
        out.body = buf_.substr(0, want);
        buf_.erase(0, want);
        return true;
    }
    // Everything up to EOF (close_notify or TCP close) or an error.
    std::string read_to_eof(std::chrono::milliseconds timeout = 5000ms) {
        set_timeout(timeout);
        while (fill()) {
        }
        std::string s;
        s.swap(buf_);
        return s;
    }
    // The session to resume with (after a response was read, so TLS 1.3 tickets have arrived).
    Session session() const { return Session(ssl_ ? SSL_get1_session(ssl_) : nullptr); }
    std::string peer_cn() const {
        X509* x = ssl_ ? SSL_get0_peer_certificate(ssl_) : nullptr;
        char cn[256] = "";
        if (x) X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
        return cn;
    }
    const char* version() const { return ssl_ ? SSL_get_version(ssl_) : ""; }

private:
    bool fill() {
        if (!handshake_ok || broken_ || eof) return false;
        char b[65536];
        ERR_clear_error();
        NoSigpipe guard;
        int r = SSL_read(ssl_, b, sizeof b);
        if (r > 0) {
            buf_.append(b, static_cast<size_t>(r));
            return true;
        }
        int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_ZERO_RETURN) {
            eof = true;
            return false;
        }
        if (e == SSL_ERROR_WANT_READ || (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK))) {
            timed_out = true;
            error = "timeout";
            return false;  // the connection stays usable
        }
        if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0) eof = true;
        error = ssl_error();
        broken_ = true;
        return false;
    }
    void set_timeout(std::chrono::milliseconds t) {
        timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        timed_out = false;
    }
    static std::string ssl_error() {
        std::string s;
        char b[256];
        while (unsigned long e = ERR_get_error()) {
            ERR_error_string_n(e, b, sizeof b);
            s += (s.empty() ? "" : "; ") + std::string(b);
        }
        return s.empty() ? std::string(strerror(errno)) : s;
    }

    int fd_ = -1;
    SSL* ssl_ = nullptr;
    bool broken_ = false;
    std::string buf_;
};

// One GET with Connection: close on a new connection.
HttpReply get_once(const ClientCtx& ctx, int port, const std::string& path = "/readyz") {
    TlsClient c(ctx, port);
    HttpReply r;
    if (c.get(path, true)) c.read_response(r);
    return r;
}

struct Fixture : ::testing::Test {
    Pki pki;
    std::string readyz = pki.dir + "/readyz";
    ClientOpts good() const { return {.ca = pki.ca_cert, .cert = pki.client_pem}; }
};

}  // namespace

using StandinTls = Fixture;

TEST_F(StandinTls, CurlReadyzOkWithKubeletClientCert) {
    Standin s(tls_args(pki));
    auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, "--key", pki.client_pem, url(s.port)});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.http, 200) << r.output;
    EXPECT_EQ(r.output.rfind("ok\nHTTP_CODE=200", 0), 0u) << r.output;
    // The same identity as separate cert and key files, and a DNS name from the SAN.
    r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_cert, "--key", pki.client_key, "--resolve",
              "kubernetes:" + std::to_string(s.port) + ":127.0.0.1", url(s.port, "/version", "kubernetes")});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("served by tls-one path /version\n"), std::string::npos) << r.output;
    EXPECT_TRUE(s.wait_output("handshake resumed=0 peer=\"system:node:test\""));
    EXPECT_EQ(s.count_output("handshake resumed="), 2u) << s.output();
    EXPECT_TRUE(s.wait_output("request path=/readyz status=200\n"));
    EXPECT_TRUE(s.wait_output("request path=/version status=200\n"));
    EXPECT_EQ(s.count_output("handshake failed"), 0u) << s.output();
}

TEST_F(StandinTls, CurlRefusedWithoutClientCert) {
    Standin s(tls_args(pki));
    auto r = curl({"--cacert", pki.ca_cert, url(s.port)});
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.http, 200) << r.output;
    EXPECT_TRUE(s.wait_output("handshake failed reason=\"peer did not return a certificate")) << s.output();
    EXPECT_EQ(s.count_output("request path="), 0u);
}

TEST_F(StandinTls, CurlRefusedWithUntrustedClientCert) {
    Standin s(tls_args(pki));
    auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.untrusted_client_pem, "--key", pki.untrusted_client_pem,
                   url(s.port)});
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.http, 200) << r.output;
    EXPECT_TRUE(s.wait_output("handshake failed reason=\"certificate verify failed: unable to get local issuer"))
        << s.output();
    EXPECT_EQ(s.count_output("request path="), 0u);
}

TEST_F(StandinTls, CurlRefusedWithExpiredClientCert) {
    Standin s(tls_args(pki));
    auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.expired_client_pem, "--key", pki.expired_client_pem,
                   url(s.port)});
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.http, 200) << r.output;
    EXPECT_TRUE(s.wait_output("handshake failed reason=\"certificate verify failed: certificate has expired"))
        << s.output();
}

// The same three refusals seen by an OpenSSL client, over TLS 1.3 (where the client's handshake
// completes and the refusal arrives as an alert on the first read) and TLS 1.2 (where it fails).
TEST_F(StandinTls, ClientCertRefusalsOverTls13And12) {
    Standin s(tls_args(pki));
    for (int v : {TLS1_3_VERSION, TLS1_2_VERSION}) {
        for (const std::string& cert : {std::string(), pki.untrusted_client_pem, pki.expired_client_pem}) {
            SCOPED_TRACE(std::to_string(v) + " cert=" + cert);
            ClientCtx ctx({.ca = pki.ca_cert, .cert = cert, .max_version = v});
            size_t before = s.count_output("handshake failed");
            TlsClient c(ctx, s.port);
            HttpReply r;
            EXPECT_FALSE(c.get("/readyz", true) && c.read_response(r)) << r.head;
            EXPECT_EQ(r.status, 0);
            EXPECT_FALSE(c.timed_out);
            if (v == TLS1_2_VERSION) {
                EXPECT_FALSE(c.handshake_ok);
            }
            EXPECT_TRUE(eventually([&] { return s.count_output("handshake failed") == before + 1; })) << s.output();
        }
    }
    ClientCtx ok(good());
    EXPECT_EQ(get_once(ok, s.port).status, 200);
    EXPECT_EQ(s.count_output("request path="), 1u);
}

TEST_F(StandinTls, NoClientCaMeansNoClientCertRequested) {
    Standin s(tls_args(pki, /*client_auth=*/false));
    auto r = curl({"--cacert", pki.ca_cert, url(s.port)});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.http, 200);
    EXPECT_TRUE(s.wait_output("handshake resumed=0 peer=\"-\""));
    // A client that has a certificate does not send it when none is asked for.
    ClientCtx ctx(good());
    TlsClient c(ctx, s.port);
    HttpReply h;
    ASSERT_TRUE(c.get("/readyz", true) && c.read_response(h));
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(s.count_output("peer=\"system:node:test\""), 0u);
}

TEST_F(StandinTls, ReadyzFileSwitchesAnswers) {
    Standin s(tls_args(pki, true, readyz));  // file missing: 200
    auto code = [&](std::string* body = nullptr) {
        auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, url(s.port)});
        if (body) *body = r.output.substr(0, r.output.rfind("\nHTTP_CODE="));
        return r.http;
    };
    std::string body;
    EXPECT_EQ(code(&body), 200);
    EXPECT_EQ(body, "ok");
    set_readyz(readyz, "500");
    EXPECT_EQ(code(&body), 500);
    EXPECT_EQ(body, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n");
    set_readyz(readyz, "401");
    EXPECT_EQ(code(&body), 401);
    EXPECT_NE(body.find("\"reason\":\"Unauthorized\""), std::string::npos) << body;
    EXPECT_NE(body.find("\"code\":401"), std::string::npos) << body;
    set_readyz(readyz, "  403 \n");
    EXPECT_EQ(code(&body), 403);
    EXPECT_NE(body.find("User \\\"system:node:test\\\" cannot get path \\\"/readyz\\\""), std::string::npos) << body;
    set_readyz(readyz, "200");
    EXPECT_EQ(code(&body), 200);
    set_readyz(readyz, "503");
    EXPECT_EQ(code(), 503);
    ASSERT_EQ(unlink(readyz.c_str()), 0);
    EXPECT_EQ(code(), 200);
    // Only GET /readyz (with or without a query) follows the file.
    set_readyz(readyz, "500");
    auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, url(s.port, "/readyz?verbose")});
    EXPECT_EQ(r.http, 500);
    r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, url(s.port, "/livez")});
    EXPECT_EQ(r.http, 200);
    for (const char* st : {"200", "500", "401", "403", "503"})
        EXPECT_GE(s.count_output(std::string("request path=/readyz status=") + st + "\n"), 1u) << st;
}

TEST_F(StandinTls, ReadyzFileIsReadOnEveryRequestOfAKeepAliveConnection) {
    Standin s(tls_args(pki, true, readyz));
    ClientCtx ctx(good());
    TlsClient c(ctx, s.port);
    HttpReply r;
    ASSERT_TRUE(c.get("/version") && c.read_response(r));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "served by tls-one path /version\n");
    EXPECT_NE(r.head.find("X-Served-By: tls-one\r\n"), std::string::npos) << r.head;
    for (const char* mode : {"200", "500", "401", "403", "200"}) {
        set_readyz(readyz, mode);
        ASSERT_TRUE(c.get("/readyz") && c.read_response(r)) << c.error;
        EXPECT_EQ(r.status, std::atoi(mode));
    }
    EXPECT_EQ(s.count_output("handshake resumed="), 1u);
    EXPECT_EQ(s.count_output("request path="), 6u);
}

TEST_F(StandinTls, WrongCaOnClientSideFailsVerification) {
    Standin s(tls_args(pki));
    auto r = curl({"--cacert", pki.other_ca_cert, "--cert", pki.client_pem, url(s.port)});
    EXPECT_EQ(r.code, 60) << r.output;  // CURLE_PEER_FAILED_VERIFICATION
    ClientCtx ctx({.ca = pki.other_ca_cert, .cert = pki.client_pem});
    TlsClient c(ctx, s.port, "127.0.0.1");
    EXPECT_FALSE(c.handshake_ok);
    EXPECT_EQ(c.verify_result, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY) << c.error;
    EXPECT_TRUE(eventually([&] { return s.count_output("handshake failed") == 2; })) << s.output();
    EXPECT_EQ(s.count_output("request path="), 0u);
}

TEST_F(StandinTls, ServerNameVerification) {
    {
        Standin s(tls_args(pki));
        ClientCtx ctx(good());
        for (const char* host : {"127.0.0.1", "localhost", "kubernetes"}) {
            TlsClient c(ctx, s.port, host);
            EXPECT_TRUE(c.handshake_ok) << host << ": " << c.error;
            EXPECT_EQ(c.verify_result, X509_V_OK) << host;
            EXPECT_EQ(c.peer_cn(), "kube-apiserver");
        }
        TlsClient c(ctx, s.port, "elsewhere.example");
        EXPECT_FALSE(c.handshake_ok);
        EXPECT_EQ(c.verify_result, X509_V_ERR_HOSTNAME_MISMATCH);
    }
    {
        Standin s6(tls_args(pki), "[::1]:0");
        ClientCtx ctx(good());
        TlsClient c(ctx, s6.port, "::1", nullptr, /*ipv6=*/true);
        EXPECT_TRUE(c.handshake_ok) << c.error;
        HttpReply r;
        ASSERT_TRUE(c.get("/readyz", true) && c.read_response(r));
        EXPECT_EQ(r.status, 200);
        auto cr = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, url(s6.port, "/readyz", "[::1]")});
        EXPECT_EQ(cr.http, 200) << cr.output;
    }
    Standin w({"--tls-cert", pki.wrong_name_server_cert, "--tls-key", pki.wrong_name_server_key, "--client-ca",
               pki.ca_cert});
    ClientCtx ctx(good());
    {
        TlsClient c(ctx, w.port, "127.0.0.1");
        EXPECT_FALSE(c.handshake_ok);
        EXPECT_EQ(c.verify_result, X509_V_ERR_IP_ADDRESS_MISMATCH);
    }
    {
        TlsClient c(ctx, w.port, "kubernetes");
        EXPECT_FALSE(c.handshake_ok);
        EXPECT_EQ(c.verify_result, X509_V_ERR_HOSTNAME_MISMATCH);
    }
    {
        TlsClient c(ctx, w.port, "elsewhere.example");  // its one name; the chain itself is fine
        EXPECT_TRUE(c.handshake_ok) << c.error;
    }
    auto r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, url(w.port)});
    EXPECT_EQ(r.code, 60) << r.output;
    r = curl({"--cacert", pki.ca_cert, "--cert", pki.client_pem, "--resolve",
              "kubernetes:" + std::to_string(w.port) + ":127.0.0.1", url(w.port, "/readyz", "kubernetes")});
    EXPECT_EQ(r.code, 60) << r.output;
}

struct ResumeCase {
    const char* name;
    int max_version;
    bool no_ticket;
};

TEST_F(StandinTls, SessionResumption) {
    Standin s(tls_args(pki));
    for (ResumeCase rc : {ResumeCase{"TLSv1.3 ticket", TLS1_3_VERSION, false},
                          ResumeCase{"TLSv1.2 ticket", TLS1_2_VERSION, false},
                          ResumeCase{"TLSv1.2 session id", TLS1_2_VERSION, true}}) {
        SCOPED_TRACE(rc.name);
        ClientCtx ctx({.ca = pki.ca_cert, .cert = pki.client_pem, .max_version = rc.max_version,
                       .no_ticket = rc.no_ticket});
        size_t resumed_before = s.count_output("handshake resumed=1 peer=\"system:node:test\"");
        Session sess;
        {
            TlsClient a(ctx, s.port, "127.0.0.1");
            ASSERT_TRUE(a.handshake_ok) << a.error;
            EXPECT_FALSE(a.reused);
            EXPECT_STREQ(a.version(), rc.max_version == TLS1_3_VERSION ? "TLSv1.3" : "TLSv1.2");
            HttpReply r;
            ASSERT_TRUE(a.get("/readyz") && a.read_response(r)) << a.error;
            EXPECT_EQ(r.status, 200);
            sess = a.session();
            ASSERT_TRUE(sess);
            EXPECT_EQ(SSL_SESSION_is_resumable(sess.get()), 1);
        }
        for (int i = 0; i < 2; ++i) {
            TlsClient b(ctx, s.port, "127.0.0.1", sess.get());
            ASSERT_TRUE(b.handshake_ok) << b.error;
            EXPECT_TRUE(b.reused);
            HttpReply r;
            ASSERT_TRUE(b.get("/readyz", true) && b.read_response(r)) << b.error;
            EXPECT_EQ(r.status, 200);
            if (rc.max_version == TLS1_3_VERSION) sess = b.session();  // TLS 1.3 tickets are single use
        }
        EXPECT_TRUE(eventually([&] {
            return s.count_output("handshake resumed=1 peer=\"system:node:test\"") == resumed_before + 2;
        })) << s.output();
    }
    EXPECT_EQ(s.count_output("handshake failed"), 0u) << s.output();
}

TEST_F(StandinTls, TlsOlderThan12IsRefused) {
    Standin s(tls_args(pki));
    ClientCtx ctx({.ca = pki.ca_cert, .cert = pki.client_pem, .max_version = TLS1_1_VERSION,
                   .min_version = TLS1_VERSION});
    TlsClient c(ctx, s.port);
    EXPECT_FALSE(c.handshake_ok);
    EXPECT_TRUE(s.wait_output("handshake failed reason=\"unsupported protocol")) << s.output();
}

TEST_F(StandinTls, HangDoesNotBlockOtherConnections) {
    Standin s(tls_args(pki, true, readyz));
    set_readyz(readyz, "hang");
    ClientCtx ctx(good());
    TlsClient h(ctx, s.port);
    ASSERT_TRUE(h.get("/readyz"));
    ASSERT_TRUE(s.wait_output("request path=/readyz status=hang\n"));
    // Another connection is served while the first one hangs: the other path, then /readyz.
    EXPECT_EQ(get_once(ctx, s.port, "/version").status, 200);
    set_readyz(readyz, "200");
    EXPECT_EQ(get_once(ctx, s.port).status, 200);
    HttpReply r;
    EXPECT_FALSE(h.read_response(r, 100ms));
    EXPECT_TRUE(h.timed_out) << h.error;
    EXPECT_FALSE(h.eof);
    // A second hung connection; both go away when the client closes.
    set_readyz(readyz, "hang");
    {
        TlsClient h2(ctx, s.port);
        ASSERT_TRUE(h2.get("/readyz"));
        EXPECT_TRUE(eventually([&] { return s.count_output("status=hang") == 2; }));
    }
    set_readyz(readyz, "200");
    EXPECT_EQ(get_once(ctx, s.port).status, 200);
}

TEST_F(StandinTls, SlowAnswersLate) {
    Standin s(tls_args(pki, true, readyz));
    set_readyz(readyz, "slow 150");
    ClientCtx ctx(good());
    auto t0 = Clock::now();
    HttpReply r = get_once(ctx, s.port);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "ok");
    EXPECT_GE(Clock::now() - t0, 150ms);
}

TEST_F(StandinTls, GarbageThenClose) {
    Standin s(tls_args(pki, true, readyz));
    set_readyz(readyz, "garbage");
    ClientCtx ctx(good());
    TlsClient c(ctx, s.port);
    ASSERT_TRUE(c.get("/readyz"));
    EXPECT_EQ(c.read_to_eof(), "NOT HTTP AT ALL\r\n\r\n");
    EXPECT_TRUE(c.eof) << c.error;
    EXPECT_TRUE(s.wait_output("request path=/readyz status=garbage\n"));
}

TEST_F(StandinTls, HugeBodyIsStreamed) {
    Standin s(tls_args(pki, true, readyz));
    set_readyz(readyz, "huge");
    ClientCtx ctx(good());
    {
        TlsClient c(ctx, s.port);
        HttpReply r;
        ASSERT_TRUE(c.get("/readyz") && c.read_response(r)) << c.error;
        EXPECT_EQ(r.status, 200);
        EXPECT_NE(r.head.find("Content-Length: 10485760\r\n"), std::string::npos) << r.head;
        EXPECT_EQ(r.body.size(), 10u << 20);
        // The connection stays usable afterwards.
        ASSERT_TRUE(c.get("/version") && c.read_response(r)) << c.error;
        EXPECT_EQ(r.body, "served by tls-one path /version\n");
    }
    {
        // A reader that stops early (as a bounded health-check reader does) just closes.
        TlsClient c(ctx, s.port);
        HttpReply r;
        ASSERT_TRUE(c.get("/readyz") && c.read_response(r, 5000ms, 4096)) << c.error;
        EXPECT_EQ(r.status, 200);
        EXPECT_EQ(r.body.size(), 4096u);
    }
    set_readyz(readyz, "200");
    EXPECT_EQ(get_once(ctx, s.port).status, 200);
}

TEST_F(StandinTls, CloseAfterHandshake) {
    Standin s(tls_args(pki, true, readyz));
    ClientCtx ctx(good());
    TlsClient keep(ctx, s.port);  // opened while the file still says 200
    HttpReply r;
    ASSERT_TRUE(keep.get("/readyz") && keep.read_response(r));
    EXPECT_EQ(r.status, 200);
    set_readyz(readyz, "close");
    {
        TlsClient c(ctx, s.port);
        EXPECT_TRUE(c.handshake_ok) << c.error;
        c.get("/readyz");
        EXPECT_EQ(c.read_to_eof(), "");
        EXPECT_FALSE(c.timed_out);
    }
    // On a connection that is already open, the next /readyz is answered by closing it.
    ASSERT_TRUE(keep.get("/readyz"));
    EXPECT_FALSE(keep.read_response(r));
    EXPECT_FALSE(keep.timed_out);
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(s.wait_output("request path=/readyz status=close\n"));
    EXPECT_EQ(s.count_output("handshake resumed=0"), 2u);
}

TEST_F(StandinTls, PlainModeFollowsReadyzFileToo) {
    Standin s({"--readyz-file", readyz});
    EXPECT_NE(s.output().find("listening 127.0.0.1:" + std::to_string(s.port) + " name=tls-one\n"),
              std::string::npos);
    EXPECT_NE(http_get(s.port, "/readyz").find("HTTP/1.1 200 OK\r\n"), std::string::npos);
    set_readyz(readyz, "500");
    std::string r = http_get(s.port, "/readyz");
    EXPECT_EQ(r.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("\r\n\r\n[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n"), std::string::npos);
    EXPECT_NE(http_get(s.port, "/version").find("served by tls-one path /version\n"), std::string::npos);
    set_readyz(readyz, "garbage");
    EXPECT_EQ(http_get(s.port, "/readyz"), "NOT HTTP AT ALL\r\n\r\n");
    set_readyz(readyz, "200");
    int fd = connect_to(s.port);
    ASSERT_GE(fd, 0);
    std::string req = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t ok_before = s.count_output("request path=/readyz status=200\n");
    ASSERT_TRUE(send_all(fd, req.data(), req.size()));
    ASSERT_TRUE(eventually([&] { return s.count_output("request path=/readyz status=200\n") > ok_before; }));
    set_readyz(readyz, "close");
    EXPECT_EQ(http_get(s.port, "/readyz"), "");  // closed right after accept
    ASSERT_TRUE(send_all(fd, req.data(), req.size()));
    int err = -1;
    std::string rest = recv_until_eof(fd, &err);
    ::close(fd);
    EXPECT_EQ(err, 0);
    EXPECT_EQ(rest.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << rest;  // only the first answer
    EXPECT_EQ(rest.find("HTTP/1.1", 1), std::string::npos) << rest;
    EXPECT_TRUE(s.wait_output("request path=/readyz status=close\n"));
    EXPECT_EQ(s.count_output("handshake"), 0u);
}

TEST_F(StandinTls, EchoModeOverTls) {
    Standin s({"--mode", "echo", "--tls-cert", pki.server_cert, "--tls-key", pki.server_key});
    ClientCtx ctx({.ca = pki.ca_cert});
    TlsClient c(ctx, s.port, "127.0.0.1");
    ASSERT_TRUE(c.send("ping\r\n\r\n"));
    HttpReply r;
    ASSERT_TRUE(c.read_response(r));
    EXPECT_EQ(r.head, "ping\r\n\r\n");
}

TEST_F(StandinTls, BadTlsFlagsFailAtStart) {
    EXPECT_EQ(run({standin_bin(), "--tls-cert", pki.dir + "/missing.crt"}).code, 1);
    EXPECT_EQ(run({standin_bin(), "--tls-cert", pki.server_cert, "--tls-key", pki.wrong_name_server_key}).code, 1);
    EXPECT_EQ(run({standin_bin(), "--client-ca", pki.ca_cert}).code, 2);
    EXPECT_EQ(run({standin_bin(), "--tls-cert"}).code, 2);
    EXPECT_EQ(run({standin_bin(), "--bogus"}).code, 2);
}

TEST_F(StandinTls, PkiFiles) {
    namespace fs = std::filesystem;
    auto slurp = [](const std::string& p) {
        std::ifstream f(p);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    std::string pem = slurp(pki.client_pem);
    EXPECT_EQ(pem.rfind("-----BEGIN CERTIFICATE-----\n", 0), 0u);
    EXPECT_NE(pem.find("-----BEGIN EC PRIVATE KEY-----\n"), std::string::npos);
    EXPECT_EQ(pem, slurp(pki.client_cert) + slurp(pki.client_key));
    for (const std::string& k : {pki.server_key, pki.client_key, pki.client_pem})
        EXPECT_EQ(fs::status(k).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write) << k;
    for (const std::string& c : {pki.ca_cert, pki.server_cert, pki.client_cert})
        EXPECT_EQ(fs::status(c).permissions() & fs::perms::all,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read)
            << c;
    long long now = time(nullptr);
    EXPECT_NEAR(static_cast<double>(Pki::not_after(pki.client_pem)), static_cast<double>(now + 365LL * 86400), 120);
    EXPECT_NEAR(static_cast<double>(Pki::not_after(pki.expired_client_pem)), static_cast<double>(now - 86400), 120);
    EXPECT_GT(Pki::not_after(pki.ca_cert), now + 5LL * 365 * 86400);
    EXPECT_EQ(Pki::not_after(pki.dir + "/missing.pem"), -1);

    // issue_client rotates a file in place; the new identity and expiry are what a server sees.
    std::string path = pki.dir + "/rotating.pem";
    pki.issue_client(path, "system:node:rotated", -60, 3600);
    EXPECT_NEAR(static_cast<double>(Pki::not_after(path)), static_cast<double>(now + 3600), 120);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    Standin s(tls_args(pki));
    {
        ClientCtx ctx({.ca = pki.ca_cert, .cert = path});
        EXPECT_EQ(get_once(ctx, s.port).status, 200);
    }
    EXPECT_TRUE(s.wait_output("handshake resumed=0 peer=\"system:node:rotated\""));
    pki.issue_client(path, "system:node:untrusted", -60, 3600, /*trusted=*/false);
    {
        ClientCtx ctx({.ca = pki.ca_cert, .cert = path});
        EXPECT_EQ(get_once(ctx, s.port).status, 0);
    }
    EXPECT_TRUE(s.wait_output("handshake failed"));

    if (!getenv("KPRISM_KEEP_LOGS")) {
        std::string dir;
        {
            Pki other;
            dir = other.dir;
            EXPECT_TRUE(fs::exists(other.ca_cert));
        }
        EXPECT_FALSE(fs::exists(dir));
    }
}
