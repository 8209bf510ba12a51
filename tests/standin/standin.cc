// SPDX-License-Identifier: Apache-2.0
// kprism-standin: a stand-in apiserver for tests and the demo. Answers HTTP/1.1 requests with
// "served by NAME" (keep-alive), or echoes bytes back (--mode echo); plain TCP or TLS (blocking
// OpenSSL, a thread per connection), optionally requiring a client certificate like a
// kube-apiserver with anonymous auth disabled. GET /readyz answers as --readyz-file says.
//
// stdout, one line each, flushed: "listening ADDR name=NAME" at start; per TLS handshake
// `handshake resumed=0|1 peer="CN or -" sni=NAME` or `handshake failed reason="..." sni=NAME` (NAME
// the client's SNI, or -); per request
// `request path=PATH status=CODE` (CODE is hang, garbage or close when no response is sent),
// written before the response itself, so a client that has the response also finds the line.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "kprism/base/address.h"

namespace {

std::string g_name = "standin";
bool g_echo = false;
std::string g_readyz_file;
SSL_CTX* g_ctx = nullptr;  // null: plain TCP

std::mutex g_out_mu;
void out_line(const std::string& line) {
    std::lock_guard<std::mutex> g(g_out_mu);
    fwrite(line.data(), 1, line.size(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

void err_line(const std::string& line) {
    std::lock_guard<std::mutex> g(g_out_mu);
    fmt::print(stderr, "{}\n", line);
}

// For values printed inside "...".
std::string quote_safe(std::string s) {
    for (auto& c : s)
        if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '\'';
    return s;
}

void untrack(int fd);

// One accepted connection, plain or TLS.
struct Conn {
    int fd;
    SSL* ssl = nullptr;

    // >0 bytes, 0 on EOF or error.
    size_t read(char* p, size_t n) {
        if (!ssl) {
            for (;;) {
                ssize_t r = ::recv(fd, p, n, 0);
                if (r < 0 && errno == EINTR) continue;
                return r > 0 ? static_cast<size_t>(r) : 0;
            }
        }
        ERR_clear_error();
        int r = SSL_read(ssl, p, static_cast<int>(n));
        if (r > 0) return static_cast<size_t>(r);
        if (SSL_get_error(ssl, r) != SSL_ERROR_ZERO_RETURN) broken = true;  // else close_notify: answer it
        return 0;
    }

    bool write(const char* p, size_t n) {
        while (n > 0) {
            if (!ssl) {
                ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) return false;
                p += w;
                n -= static_cast<size_t>(w);
                continue;
            }
            ERR_clear_error();
            int chunk = n > (1u << 30) ? (1 << 30) : static_cast<int>(n);
            int w = SSL_write(ssl, p, chunk);
            if (w <= 0) {
                broken = true;
                return false;
            }
            p += w;
            n -= static_cast<size_t>(w);
        }
        return true;
    }
    bool write(const std::string& s) { return write(s.data(), s.size()); }

    // Sends close_notify when the connection is healthy, then closes the socket. After a
    // completed handshake the session stays resumable even when the connection broke (as with Go's
    // apiserver, whose resumption is stateless tickets only): OpenSSL would otherwise drop it from
    // the TLS 1.2 session cache.
    void close() {
        if (ssl) {
            if (handshaken && !broken) {
                ERR_clear_error();
                SSL_shutdown(ssl);
            } else if (handshaken) {
                SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
            }
            SSL_free(ssl);
            ssl = nullptr;
        }
        untrack(fd);  // before the fd number can be reused
        ::close(fd);
    }

    bool handshaken = false;
    bool broken = false;
};

std::string trim(std::string s) {
    size_t b = 0, e = s.size();
    while (b < e && isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
}

// Current content of --readyz-file, trimmed; "200" when unset or missing. With `body`, a first
// line "body CODE" is answered with the rest of the file, as it is, as the body; a first line
// "raw" or "rawclose" sends the rest of the file, as it is, as the whole response (status line,
// headers and body: a chunked body, or one without Content-Length delimited by the close), then
// keeps the connection ("raw") or closes it ("rawclose").
std::string readyz_mode(std::string* body = nullptr) {
    if (g_readyz_file.empty()) return "200";
    std::ifstream f(g_readyz_file, std::ios::binary);
    if (!f) return "200";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string all = ss.str();
    if (all.rfind("body ", 0) == 0 || all.rfind("raw\n", 0) == 0 || all.rfind("rawclose\n", 0) == 0 ||
        all.rfind("rawrecords\n", 0) == 0 || all.rfind("rawnotify\n", 0) == 0) {
        size_t nl = all.find('\n');
        if (body) *body = nl == std::string::npos ? "" : all.substr(nl + 1);
        return trim(all.substr(0, nl));
    }
    std::string m = trim(all);
    return m.empty() ? "200" : m;
}

// Connections being served, so that SIGUSR1 can end them all at once (as an apiserver's graceful
// shutdown or a GOAWAY wave does): the handler shuts each socket down, which is async-signal-safe.
constexpr size_t kMaxTracked = 4096;
std::atomic<int> g_conn_fds[kMaxTracked];

void track(int fd) {
    for (auto& slot : g_conn_fds) {
        int empty = -1;
        if (slot.compare_exchange_strong(empty, fd)) return;
    }
}

void untrack(int fd) {
    for (auto& slot : g_conn_fds) {
        int mine = fd;
        if (slot.compare_exchange_strong(mine, -1)) return;
    }
}

void on_sigusr1(int) {
    for (auto& slot : g_conn_fds)
        if (int fd = slot.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

// Blocks until the peer closes (or resets) the connection, reading nothing.
void wait_peer_close(int fd) {
    for (;;) {
        pollfd p{fd, POLLRDHUP, 0};
        int r = ::poll(&p, 1, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return;
    }
}

std::string response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool close_after) {
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\n"
        "X-Served-By: {}\r\n{}\r\n{}",
        code, reason, content_type, body.size(), g_name, close_after ? "Connection: close\r\n" : "", body);
}

std::string status_json(int code, const std::string& reason, const std::string& message) {
    return fmt::format(
        "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"{}\","
        "\"reason\":\"{}\",\"details\":{{}},\"code\":{}}}\n",
        message, reason, code);
}

const char* reason_phrase(int code) {
    switch (code) {
    case 200: return "OK";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

enum class After { keep, close, hang };

// Answers GET /readyz as the readyz file says. Returns what the connection does next.
After serve_readyz(Conn& c, const std::string& path, const std::string& user, bool close_after) {
    std::string custom;
    std::string mode = readyz_mode(&custom);
    auto log = [&](const std::string& status) { out_line(fmt::format("request path={} status={}", path, status)); };
    // Logged before the answer is written: a client holding the answer finds the line.
    auto send = [&](int code, const std::string& type, const std::string& body) {
        log(std::to_string(code));
        bool ok = c.write(response(code, reason_phrase(code), type, body, close_after));
        return ok && !close_after ? After::keep : After::close;
    };
    const std::string text = "text/plain; charset=utf-8";
    if (mode == "200") return send(200, text, "ok");
    if (mode == "500") return send(500, text, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n");
    if (mode == "401") return send(401, "application/json", status_json(401, "Unauthorized", "Unauthorized"));
    if (mode == "403")
        return send(403, "application/json",
                    status_json(403, "Forbidden",
                                fmt::format("forbidden: User \\\"{}\\\" cannot get path \\\"/readyz\\\"",
                                            user.empty() ? "system:anonymous" : user)));
    if (mode == "hang") {
        log("hang");
        return After::hang;
    }
    if (mode == "garbage") {
        log("garbage");
        c.write("NOT HTTP AT ALL\r\n\r\n");
        return After::close;
    }
    if (mode == "close") {
        log("close");
        return After::close;
    }
    if (mode == "raw" || mode == "rawclose") {
        log(mode);
        bool ok = c.write(custom);
        return ok && mode == "raw" && !close_after ? After::keep : After::close;
    }
    // A hostile peer: "rawrecords", the pieces of the rest split at form feeds, each its own TLS
    // record (the answer, then answers nobody asked for); "rawnotify", the rest then a
    // close_notify, and no FIN until the client goes.
    // Corked: the records leave in one TCP segment, to be read together.
    auto cork = [&](int on) { setsockopt(c.fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on); };
    if (mode == "rawrecords") {
        log(mode);
        cork(1);
        bool ok = true;
        for (size_t at = 0; ok && at <= custom.size();) {
            size_t ff = custom.find('\f', at);
            if (ff == std::string::npos) ff = custom.size();
            if (ff > at) ok = c.write(custom.data() + at, ff - at);
            at = ff + 1;
        }
        cork(0);
        return ok && !close_after ? After::keep : After::close;
    }
    if (mode == "rawnotify") {
        log(mode);
        cork(1);
        if (c.write(custom) && c.ssl) {
            ERR_clear_error();
            SSL_shutdown(c.ssl);
        }
        cork(0);
        return After::hang;
    }
    if (mode.rfind("body ", 0) == 0) {
        int code = std::atoi(mode.c_str() + 5);
        if (code < 200 || code > 599) code = 500;
        // "body CODE [hints] [chunked]": a 103 Early Hints first; the body in chunks as Go's
        // net/http sends any body past 2048 bytes without a Content-Length.
        std::istringstream words(mode.substr(5));
        bool hints = false, chunked = false;
        for (std::string w; words >> w;) {
            hints = hints || w == "hints";
            chunked = chunked || w == "chunked";
        }
        if (!hints && !chunked) return send(code, text, custom);
        log(std::to_string(code));
        std::string out;
        if (hints) out += "HTTP/1.1 103 Early Hints\r\nLink: </readyz>; rel=preload\r\n\r\n";
        if (!chunked) {
            out += response(code, reason_phrase(code), text, custom, close_after);
        } else {
            out += fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nX-Content-Type-Options: nosniff\r\n"
                               "Transfer-Encoding: chunked\r\nX-Served-By: {}\r\n{}\r\n",
                               code, reason_phrase(code), text, g_name, close_after ? "Connection: close\r\n" : "");
            for (size_t i = 0; i < custom.size(); i += 2048) {
                std::string piece = custom.substr(i, 2048);
                out += fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
            }
            out += "0\r\n\r\n";
        }
        bool ok = c.write(out);
        return ok && !close_after ? After::keep : After::close;
    }
    if (mode == "huge" || mode == "huge500") {
        constexpr size_t kHuge = 10u << 20;
        int code = mode == "huge" ? 200 : 500;
        std::string head = fmt::format(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-Served-By: {}\r\n{}\r\n", code,
            reason_phrase(code), text, kHuge, g_name, close_after ? "Connection: close\r\n" : "");
        log(std::to_string(code));
        bool ok = c.write(head);
        // huge500: a kube-apiserver-like failing check line over and over.
        std::string chunk;
        while (code == 500 && chunk.size() < 64 * 1024) chunk += "[-]etcd failed: reason withheld\n";
        if (code == 200) chunk.assign(64 * 1024, 'k');
        for (size_t sent = 0; ok && sent < kHuge; sent += chunk.size()) ok = c.write(chunk);
        return ok && !close_after ? After::keep : After::close;
    }
    if (mode.rfind("slow", 0) == 0) {
        long ms = std::strtol(mode.c_str() + 4, nullptr, 10);
        if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        return send(200, text, "ok");
    }
    if (mode.size() == 3 && isdigit(static_cast<unsigned char>(mode[0])) && isdigit(static_cast<unsigned char>(mode[1])) &&
        isdigit(static_cast<unsigned char>(mode[2]))) {
        int code = std::stoi(mode);
        if (code >= 200 && code <= 599) return send(code, text, fmt::format("readyz status {}\n", code));
    }
    err_line(fmt::format("kprism-standin: unknown --readyz-file content \"{}\"; answering 500", quote_safe(mode)));
    return send(500, text, fmt::format("kprism-standin: unknown readyz mode {}\n", mode));
}

// Parses a Content-Length header from a lowercased head; 0 if none.
size_t content_length(const std::string& lower_head) {
    size_t p = lower_head.find("\r\ncontent-length:");
    if (p == std::string::npos) return 0;
    return static_cast<size_t>(std::strtoull(lower_head.c_str() + p + 17, nullptr, 10));
}

void serve_http(Conn& c, const std::string& user) {
    char buf[16384];
    std::string pending;
    size_t skip_body = 0;
    for (;;) {
        size_t n = c.read(buf, sizeof buf);
        if (n == 0) return;
        if (g_echo) {
            if (!c.write(buf, n)) return;
            continue;
        }
        pending.append(buf, n);
        if (skip_body) {
            size_t k = std::min(skip_body, pending.size());
            pending.erase(0, k);
            skip_body -= k;
        }
        size_t end;
        while (!skip_body && (end = pending.find("\r\n\r\n")) != std::string::npos) {
            std::string head = pending.substr(0, end);
            pending.erase(0, end + 4);
            std::string method, path = "/";
            if (size_t sp = head.find(' '); sp != std::string::npos) {
                method = head.substr(0, sp);
                path = head.substr(sp + 1, head.find_first_of(" \r", sp + 1) - sp - 1);
            }
            std::string lower = head;
            for (auto& ch : lower) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
            bool close_after = lower.find("\r\nconnection: close") != std::string::npos;
            skip_body = content_length(lower);
            size_t k = std::min(skip_body, pending.size());
            pending.erase(0, k);
            skip_body -= k;
            if (method == "GET" && path.substr(0, path.find('?')) == "/readyz") {
                After a = serve_readyz(c, path, user, close_after);
                if (a == After::hang) {
                    wait_peer_close(c.fd);
                    c.broken = true;  // no close_notify to a peer that has gone
                    return;
                }
                if (a == After::close) return;
                continue;
            }
            std::string body = fmt::format("served by {} path {}\n", g_name, path);
            std::string resp = fmt::format(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Served-By: {}\r\n{}\r\n{}",
                body.size(), g_name, close_after ? "Connection: close\r\n" : "", body);
            out_line(fmt::format("request path={} status=200", path));
            if (!c.write(resp) || close_after) return;
        }
        if (pending.size() > 65536) return;
    }
}

std::string peer_cn(SSL* ssl) {
    X509* x = SSL_get0_peer_certificate(ssl);
    if (!x) return "-";
    char cn[256];
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
    return n > 0 ? std::string(cn, static_cast<size_t>(n)) : "-";
}

std::string handshake_error(SSL* ssl, int ret) {
    std::string reason;
    unsigned long e = ERR_peek_error();
    if (e) {
        const char* r = ERR_reason_error_string(e);
        reason = r ? r : fmt::format("error {:#x}", e);
    } else {
        int se = SSL_get_error(ssl, ret);
        if (se == SSL_ERROR_SYSCALL) reason = errno ? strerror(errno) : "connection closed by peer";
        else if (se == SSL_ERROR_ZERO_RETURN) reason = "connection closed by peer";
        else reason = fmt::format("SSL error {}", se);
    }
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) reason += fmt::format(": {}", X509_verify_cert_error_string(v));
    ERR_clear_error();
    return reason;
}

void serve(int fd) {
    track(fd);
    Conn c{fd};
    std::string user;
    if (g_ctx) {
        c.ssl = SSL_new(g_ctx);
        if (!c.ssl || !SSL_set_fd(c.ssl, fd)) {
            out_line("handshake failed reason=\"SSL_new\"");
            c.close();
            return;
        }
        ERR_clear_error();
        errno = 0;
        int r = SSL_accept(c.ssl);
        const char* sni = SSL_get_servername(c.ssl, TLSEXT_NAMETYPE_host_name);  // from the ClientHello
        const std::string sni_text = sni && *sni ? quote_safe(sni) : "-";
        if (r != 1) {
            out_line(fmt::format("handshake failed reason=\"{}\" sni={}", quote_safe(handshake_error(c.ssl, r)),
                                 sni_text));
            c.close();
            return;
        }
        c.handshaken = true;
        std::string cn = peer_cn(c.ssl);
        if (cn != "-") user = cn;
        out_line(fmt::format("handshake resumed={} peer=\"{}\" sni={}", SSL_session_reused(c.ssl) ? 1 : 0,
                             quote_safe(cn), sni_text));
    }
    // "close": connections are closed right after the (TLS) handshake without a response.
    if (!g_echo && !g_readyz_file.empty() && readyz_mode() == "close") {
        c.close();
        return;
    }
    serve_http(c, user);
    c.close();
}

// Offers http/1.1 when the client asks for ALPN (kubectl offers h2 and http/1.1).
int alpn_select(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                void*) {
    static const unsigned char h11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    unsigned char* sel = nullptr;
    if (SSL_select_next_proto(&sel, outlen, h11, sizeof h11, in, inlen) == OPENSSL_NPN_NEGOTIATED) {
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

[[noreturn]] void die_ssl(const std::string& what) {
    fmt::print(stderr, "kprism-standin: {}", what);
    char buf[256];
    while (unsigned long e = ERR_get_error()) {
        ERR_error_string_n(e, buf, sizeof buf);
        fmt::print(stderr, ": {}", buf);
    }
    fmt::print(stderr, "\n");
    exit(1);
}

SSL_CTX* make_ctx(const std::string& cert, const std::string& key, const std::string& client_ca) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) die_ssl("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) die_ssl("cannot load --tls-cert " + cert);
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) die_ssl("cannot load --tls-key " + key);
    if (SSL_CTX_check_private_key(ctx) != 1) die_ssl("--tls-key does not match --tls-cert");
    // Send the chain from --tls-cert only, as kube-apiserver does; without this OpenSSL would
    // complete it from the --client-ca store and a client trusting another CA would see a
    // different verify error than against a real apiserver.
    SSL_CTX_set_mode(ctx, SSL_MODE_NO_AUTO_CHAIN);
    if (!client_ca.empty()) {
        if (SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1)
            die_ssl("cannot load --client-ca " + client_ca);
        STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str());
        if (!names) die_ssl("cannot read CA names from --client-ca " + client_ca);
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    // Resumption: TLS 1.3 tickets (OpenSSL's default of 2 per handshake) and the TLS 1.2
    // server-side session cache (and tickets). The id context is required with client auth.
    static const unsigned char sid_ctx[] = "kprism-standin";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_timeout(ctx, 3600);
    // Like Go's crypto/tls, a peer that closes without close_notify is an ordinary EOF, and
    // its session stays resumable.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, nullptr);
    return ctx;
}

void usage() {
    fmt::print(stderr,
               "usage: kprism-standin --listen HOST:PORT [--name NAME] [--mode http|echo]\n"
               "         [--tls-cert FILE [--tls-key FILE] [--client-ca FILE]] [--readyz-file FILE]\n"
               "  --tls-cert/--tls-key  serve TLS >= 1.2 (key defaults to the cert file)\n"
               "  --client-ca           require a client certificate signed by this CA\n"
               "  --readyz-file         re-read on every GET /readyz: 200 (default, also when missing),\n"
               "                        500, 401, 403, any 3-digit code, hang, slow MS, garbage, huge, huge500,\n"
               "                        close, or a line \"body CODE\" and the body to answer after it\n"
               "                        (\"body CODE hints chunked\": a 103 Early Hints first, the body chunked),\n"
               "                        or a line \"raw\" (then keep) or \"rawclose\" and the whole response after it\n"
               "                        (\"rawrecords\": split at form feeds, a TLS record each; \"rawnotify\": then\n"
               "                        a close_notify, the FIN only once the client has gone)\n"
               "  SIGUSR1               shuts down every connection being served at once\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string listen = "127.0.0.1:0";
    std::string tls_cert, tls_key, client_ca;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::optional<std::string> {
            if (i + 1 < argc) return std::string(argv[++i]);
            return std::nullopt;
        };
        std::optional<std::string> v;
        if (a == "--help" || a == "-h") {
            usage();
            return 0;
        }
        if (a != "--listen" && a != "--name" && a != "--mode" && a != "--tls-cert" && a != "--tls-key" &&
            a != "--client-ca" && a != "--readyz-file") {
            fmt::print(stderr, "kprism-standin: unknown argument {}\n", a);
            usage();
            return 2;
        }
        if (!(v = next())) {
            fmt::print(stderr, "kprism-standin: {} needs a value\n", a);
            return 2;
        }
        if (a == "--listen") listen = *v;
        else if (a == "--name") g_name = *v;
        else if (a == "--mode") {
            if (*v != "http" && *v != "echo") {
                fmt::print(stderr, "kprism-standin: --mode is http or echo\n");
                return 2;
            }
            g_echo = *v == "echo";
        } else if (a == "--tls-cert") tls_cert = *v;
        else if (a == "--tls-key") tls_key = *v;
        else if (a == "--client-ca") client_ca = *v;
        else if (a == "--readyz-file") g_readyz_file = *v;
    }
    if (tls_cert.empty() && (!tls_key.empty() || !client_ca.empty())) {
        fmt::print(stderr, "kprism-standin: --tls-key and --client-ca need --tls-cert\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    for (auto& slot : g_conn_fds) slot.store(-1);
    signal(SIGUSR1, on_sigusr1);
    if (!tls_cert.empty()) g_ctx = make_ctx(tls_cert, tls_key.empty() ? tls_cert : tls_key, client_ca);
    kprism::HostPort hp;
    std::string err;
    if (!kprism::parse_host_port(listen, hp, &err) && listen.substr(listen.rfind(':')) != ":0") {
        fmt::print(stderr, "kprism-standin: {}\n", err);
        return 2;
    }
    std::string host = listen.substr(0, listen.rfind(':'));
    int port = std::stoi(listen.substr(listen.rfind(':') + 1));
    sockaddr_storage ss;
    if (!kprism::ip_to_sockaddr(host, static_cast<uint16_t>(port), ss)) {
        fmt::print(stderr, "kprism-standin: bad listen address {}\n", listen);
        return 2;
    }
    int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), kprism::sockaddr_len(reinterpret_cast<sockaddr*>(&ss))) != 0 ||
        ::listen(fd, 1024) != 0) {
        fmt::print(stderr, "kprism-standin: cannot listen on {}: {}\n", listen, strerror(errno));
        return 1;
    }
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    out_line(fmt::format("listening {} name={}", kprism::sockaddr_str(reinterpret_cast<sockaddr*>(&ss)), g_name));
    for (;;) {
        int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            usleep(10000);
            continue;
        }
        std::thread(serve, c).detach();
    }
}
