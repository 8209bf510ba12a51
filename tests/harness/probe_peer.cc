// SPDX-License-Identifier: Apache-2.0
// The hostile probe peer: TLS over memory BIOs on a blocking socket, a thread per connection
// (TcpServer), each request answered by the test's script, record by record and write by write.
#include "harness/probe_peer.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace it {

Script& Script::record(std::string plaintext) {
    steps.push_back({Step::record, std::move(plaintext)});
    return *this;
}

Script& Script::records(const std::string& s, size_t each) {
    for (size_t i = 0; i < s.size(); i += each) record(s.substr(i, each));
    return *this;
}

Script& Script::send() {
    steps.push_back({Step::send, ""});
    return *this;
}

Script& Script::send_all_but(size_t n) {
    steps.push_back({Step::send_all_but, "", n});
    return *this;
}

Script& Script::close_notify() {
    steps.push_back({Step::close_notify, ""});
    return *this;
}

Script& Script::fin() {
    steps.push_back({Step::fin, ""});
    return *this;
}

Script& Script::sleep(std::chrono::milliseconds ms) {
    steps.push_back({Step::sleep, "", static_cast<size_t>(ms.count())});
    return *this;
}

Script& Script::drip(const std::string& s, std::chrono::milliseconds gap) {
    for (char c : s) record(std::string(1, c)).send().sleep(gap);
    return *this;
}

Script& Script::hold() {
    steps.push_back({Step::hold, ""});
    return *this;
}

Script& Script::close() {
    steps.push_back({Step::close, ""});
    return *this;
}

Script& Script::raw(std::string bytes) {
    steps.push_back({Step::raw, std::move(bytes)});
    return *this;
}

Script& Script::expect(int code) {
    status = code;
    result = code == 200 ? "ready" : code == 401 || code == 403 ? "unauthorized" : "not_ready";
    return *this;
}

Script& Script::expect_class(std::string r) {
    result = std::move(r);
    return *this;
}

std::string http_answer(int code, int seq, const std::string& extra_headers, const std::string& version) {
    std::string body = code == 200 ? "ok" : fmt::format("[-]etcd failed: reason withheld\n(answer {})\n", seq);
    return fmt::format("{} {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{}\r\n{}",
                       version, code, code == 200 ? "OK" : "Status", body.size(), extra_headers, body);
}

Script answer(int code, int seq) { return Script().record(http_answer(code, seq)).send().expect(code); }

namespace {

void free_ctx(void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); }

}  // namespace

struct ProbePeer::Conn {
    int fd;
    SSL* ssl = nullptr;
    BIO* rbio = nullptr;
    BIO* wbio = nullptr;
    std::string outbox;   // made, not sent yet
    std::string pending;  // request bytes read, not yet a whole head
    int id = 0, nth = 0;

    void take_records() {
        char buf[16384];
        int n;
        while ((n = BIO_read(wbio, buf, sizeof buf)) > 0) outbox.append(buf, static_cast<size_t>(n));
    }
    bool send(size_t limit = std::string::npos) {
        take_records();
        size_t n = std::min(limit, outbox.size());
        bool ok = n == 0 || send_all(fd, outbox.data(), n);
        outbox.erase(0, n);
        return ok;
    }
    // Bytes from the socket into OpenSSL; false at EOF or an error.
    bool read_some() {
        char buf[16384];
        for (;;) {
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            BIO_write(rbio, buf, static_cast<int>(n));
            return true;
        }
    }
    // The next request's head; false when the connection ended first.
    bool next_request() {
        char buf[4096];
        for (;;) {
            size_t end = pending.find("\r\n\r\n");
            if (end != std::string::npos) {
                pending.erase(0, end + 4);
                return true;
            }
            ERR_clear_error();
            int n = SSL_read(ssl, buf, sizeof buf);
            if (n > 0) {
                pending.append(buf, static_cast<size_t>(n));
                continue;
            }
            if (SSL_get_error(ssl, n) != SSL_ERROR_WANT_READ || !read_some()) return false;
        }
    }
};

ProbePeer::ProbePeer(const Pki& pki, Scripter s) : ctx_(SSL_CTX_new(TLS_server_method()), free_ctx), scripter_(std::move(s)) {
    auto* ctx = static_cast<SSL_CTX*>(ctx_.get());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, pki.server_cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, pki.server_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(ctx, pki.ca_cert.c_str(), nullptr) != 1)
        throw std::runtime_error("ProbePeer: cannot load the test PKI");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    static const unsigned char sid_ctx[] = "kprism-probe-peer";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    server_ = std::make_unique<TcpServer>([this](int fd) { serve(fd); });
}

ProbePeer::~ProbePeer() { server_.reset(); }

void ProbePeer::set(Scripter s) {
    std::lock_guard<std::mutex> g(mu_);
    scripter_ = std::move(s);
}

std::vector<PeerAnswer> ProbePeer::answers() const {
    std::lock_guard<std::mutex> g(mu_);
    return answers_;
}

int ProbePeer::handshakes() const {
    std::lock_guard<std::mutex> g(mu_);
    return conns_;
}

int ProbePeer::unanswered() const {
    std::lock_guard<std::mutex> g(mu_);
    return unanswered_;
}

void ProbePeer::serve(int fd) {
    block_sigpipe();
    Conn c{fd};
    c.ssl = SSL_new(static_cast<SSL_CTX*>(ctx_.get()));
    c.rbio = BIO_new(BIO_s_mem());
    c.wbio = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(c.rbio, -1);
    SSL_set_bio(c.ssl, c.rbio, c.wbio);
    SSL_set_accept_state(c.ssl);
    for (;;) {
        ERR_clear_error();
        int r = SSL_do_handshake(c.ssl);
        bool sent = c.send();
        if (r == 1) break;
        if (!sent || SSL_get_error(c.ssl, r) != SSL_ERROR_WANT_READ || !c.read_some()) {
            SSL_free(c.ssl);
            ERR_clear_error();
            return;
        }
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        c.id = ++conns_;
    }
    while (c.next_request()) {
        Scripter sc;
        PeerRequest req{};
        {
            std::lock_guard<std::mutex> g(mu_);
            req = {++seq_, c.id, ++c.nth};
            sc = scripter_;
        }
        Script s = sc(req);
        {
            std::lock_guard<std::mutex> g(mu_);
            answers_.push_back({req, s.status, s.result});
        }
        if (!run(c, s)) break;
    }
    SSL_set_shutdown(c.ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(c.ssl);
    ERR_clear_error();
}

// Plays a script; false when the connection is over after it.
bool ProbePeer::run(Conn& c, const Script& s) {
    for (const auto& st : s.steps) {
        switch (st.kind) {
        case Script::Step::record:
            SSL_write(c.ssl, st.bytes.data(), static_cast<int>(st.bytes.size()));  // memory BIO: whole
            break;
        case Script::Step::send:
            if (!c.send()) return false;
            break;
        case Script::Step::send_all_but:
            c.take_records();
            if (!c.send(c.outbox.size() > st.n ? c.outbox.size() - st.n : 0)) return false;
            break;
        case Script::Step::close_notify:
            SSL_shutdown(c.ssl);
            break;
        case Script::Step::raw:
            c.take_records();
            c.outbox += st.bytes;
            break;
        case Script::Step::sleep:
            std::this_thread::sleep_for(std::chrono::milliseconds(st.n));
            break;
        case Script::Step::close:
            c.send();
            return false;
        case Script::Step::fin:
            if (!c.send()) return false;
            ::shutdown(c.fd, SHUT_WR);
            [[fallthrough]];
        case Script::Step::hold: {
            // Whatever arrives now is a request nobody will answer: the probe's timeout.
            char buf[16384];
            for (;;) {
                ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) return false;
                std::lock_guard<std::mutex> g(mu_);
                ++unanswered_;
                answers_.push_back({{++seq_, c.id, ++c.nth}, 0, "timeout"});
            }
        }
        }
    }
    return true;
}

std::vector<Observed> observed_checks(const Process& k, const std::string& addr) {
    std::vector<Observed> out;
    const std::string out_text = k.output();
    const std::string needle = "msg=\"health check\" upstream=" + addr + " ";
    for (size_t at = out_text.find(needle); at != std::string::npos; at = out_text.find(needle, at + 1)) {
        std::string line = out_text.substr(at, out_text.find('\n', at) - at);
        size_t r = line.find(" result=");
        if (r == std::string::npos) continue;
        Observed o{line.substr(r + 8, line.find(' ', r + 8) - r - 8), 0};
        if (size_t a = line.find("(answer "); a != std::string::npos) o.seq = std::atoi(line.c_str() + a + 8);
        out.push_back(o);
    }
    return out;
}

}  // namespace it
