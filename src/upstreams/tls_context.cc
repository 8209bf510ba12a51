// SPDX-License-Identifier: Apache-2.0
// Loading and hot-reloading the client certificate, key and CA for readiness checks.
#include "kprism/upstreams/tls_context.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "kprism/base/log.h"

namespace kprism {

FileStamp FileStamp::of(const std::string& path) {
    FileStamp f;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return f;
    f.exists = true;
    f.dev = st.st_dev;
    f.ino = st.st_ino;
    f.size = st.st_size;
    f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return f;
}

std::string openssl_error() {
    unsigned long e = ERR_get_error();
    unsigned long last = e;
    while (e != 0) {
        last = e;
        e = ERR_get_error();
    }
    if (last == 0) return "unknown TLS error";
    char buf[256];
    ERR_error_string_n(last, buf, sizeof buf);
    return buf;
}

static std::string asn1_time_str(const ASN1_TIME* t, int64_t* unix_out) {
    struct tm tm {};
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return "?";
    if (unix_out) *unix_out = static_cast<int64_t>(timegm(&tm));
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// The key's permission bits, checked at every load: a key that other users may read or write is
// logged as a warning with its name and mode (never anything of its content).
static void warn_if_key_exposed(const std::string& key) {
    struct stat st;
    if (::stat(key.c_str(), &st) != 0 || (st.st_mode & S_IRWXO) == 0) return;
    log::warn("client key file is accessible to other users; remove their access (chmod o-rwx)",
              {{"file", key}, {"mode", fmt::format("{:04o}", st.st_mode & 07777)}});
}

SSL_CTX* TlsClientContext::build(const std::string& cert, const std::string& key, const std::string& ca,
                                 std::string* err, std::string* subject, int64_t* not_after) {
    ERR_clear_error();
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    auto bad = [&](std::string what) -> SSL_CTX* {
        *err = fmt::format("{}: {}", what, openssl_error());
        SSL_CTX_free(ctx);
        return nullptr;
    };
    if (!ctx) return bad("cannot create TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    // An encrypted key fails to load instead of making OpenSSL's default password callback ask for a
    // pass phrase on the terminal (or standard input), blocking the event loop until someone answers.
    // Found by tests/fuzz/pem_fuzz.cc.
    SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
    // Client-side session cache for resumption; the checker stores sessions itself, per upstream.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) return bad(fmt::format("CA file {}", ca));
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1)
        return bad(fmt::format("client certificate {}", cert));
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
        return bad(fmt::format("client key {}", key));
    if (SSL_CTX_check_private_key(ctx) != 1) return bad("client key does not match the certificate");
    if (X509* x = SSL_CTX_get0_certificate(ctx)) {
        if (subject) {
            char buf[512];
            X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof buf);
            *subject = buf;
        }
        int64_t na = 0;
        asn1_time_str(X509_get0_notAfter(x), &na);
        if (not_after) *not_after = na;
    }
    return ctx;
}

TlsClientContext::TlsClientContext(std::string cert, std::string key, std::string ca)
    : cert_(std::move(cert)), key_(std::move(key)), ca_(std::move(ca)) {}

TlsClientContext::~TlsClientContext() { SSL_CTX_free(ctx_); }

namespace {

uint64_t next_generation = 0;  // across contexts: a reload's new one never reuses a number

// Appends the SHA-256 of the file's bytes to *out; false and *err ("WHAT PATH: cannot read:
// ...") when it cannot be read. Only a regular file of at most kMaxTlsFileBytes: the files are
// read on the event loop, and a path that names a FIFO (whose open and reads wait for a writer),
// a device such as /dev/zero (endless), or a huge file must not stall it.
bool digest_file(const char* what, const std::string& path, std::string* out, std::string* err) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        *err = fmt::format("{} {}: cannot read: {}", what, path, std::strerror(errno));
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxTlsFileBytes) {
        *err = !S_ISREG(st.st_mode)
                   ? fmt::format("{} {}: cannot read: not a regular file", what, path)
                   : fmt::format("{} {}: {} bytes; the limit is {} bytes (1 MiB)", what, path, st.st_size,
                                 kMaxTlsFileBytes);
        ::close(fd);
        return false;
    }
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), nullptr) == 1;
    char buf[16384];
    uint64_t total = 0;
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            *err = fmt::format("{} {}: cannot read: {}", what, path, std::strerror(errno));
            ok = false;
        }
        if (n <= 0 || !ok) break;
        ok = EVP_DigestUpdate(md, buf, static_cast<size_t>(n)) == 1;
        if ((total += static_cast<uint64_t>(n)) > kMaxTlsFileBytes) {  // grew since the fstat
            *err = fmt::format("{} {}: more than {} bytes (1 MiB)", what, path, kMaxTlsFileBytes);
            ok = false;
        }
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (ok && EVP_DigestFinal_ex(md, d, &len) == 1) out->append(reinterpret_cast<const char*>(d), len);
    else if (err->empty()) *err = fmt::format("{} {}: cannot read: digest failed", what, path);
    EVP_MD_CTX_free(md);
    ::close(fd);
    return ok && len > 0;
}

}  // namespace

// Stamps first, then the bytes, then the build: a file replaced meanwhile shows a new stamp at
// the next look, and at worst costs one more build.
TlsClientContext::Load TlsClientContext::load(uint64_t now_ms) {
    last_check_ms_ = now_ms;
    stamped_ = true;
    cert_st_ = FileStamp::of(cert_);
    key_st_ = FileStamp::of(key_);
    ca_st_ = FileStamp::of(ca_);
    missing_.clear();
    if (!cert_st_.exists || !key_st_.exists || !ca_st_.exists) {
        missing_ = !cert_st_.exists ? cert_ : !key_st_.exists ? key_ : ca_;
        const char* what = !cert_st_.exists ? "client certificate" : !key_st_.exists ? "client key" : "CA file";
        error_ = fmt::format("{} {} does not exist", what, missing_);
        return Load::missing;
    }
    std::string digest, err;
    const std::pair<const char*, const std::string*> files[] = {
        {"client certificate", &cert_}, {"client key", &key_}, {"CA file", &ca_}};
    for (const auto& [what, path] : files)
        if (!digest_file(what, *path, &digest, &err)) {
            error_ = err;
            return Load::failed;
        }
    if (ctx_ && digest == digest_) {  // the bytes in use: nothing to build, nothing to drop
        error_.clear();
        return Load::same;
    }
    std::string subject;
    int64_t not_after = 0;
    SSL_CTX* fresh = build(cert_, key_, ca_, &err, &subject, &not_after);
    if (!fresh) {
        error_ = err;
        return Load::failed;
    }
    SSL_CTX_free(ctx_);
    ctx_ = fresh;
    digest_ = std::move(digest);
    generation_ = ++next_generation;
    error_.clear();
    subject_ = std::move(subject);
    not_after_ = not_after;
    return Load::built;
}

std::string TlsClientContext::content_hex() const {
    std::string out;
    if (!ctx_) return out;
    for (unsigned char c : digest_) out += fmt::format("{:02x}", c);
    return out;
}

bool TlsClientContext::load_now(uint64_t now_ms) { return load(now_ms) == Load::built; }

void TlsClientContext::take_paths(const TlsClientContext& other) {
    cert_ = other.cert_;
    key_ = other.key_;
    ca_ = other.ca_;
    cert_st_ = other.cert_st_;
    key_st_ = other.key_st_;
    ca_st_ = other.ca_st_;
    stamped_ = other.stamped_;
    last_check_ms_ = other.last_check_ms_;
    error_.clear();
    missing_.clear();
}

void TlsClientContext::log_loaded(bool first, bool rotated) const {
    warn_if_key_exposed(key_);
    char expiry[32] = "?";
    time_t na = static_cast<time_t>(not_after_);
    struct tm tm {};
    if (gmtime_r(&na, &tm)) strftime(expiry, sizeof expiry, "%Y-%m-%dT%H:%M:%SZ", &tm);
    log::info(first ? "client certificate loaded" : rotated ? "client certificate rotated" : "TLS files reloaded",
              {{"cert", cert_}, {"subject", subject_}, {"not_after", expiry}, {"ca", ca_}});
}

void TlsClientContext::log_not_loaded() const {
    if (!missing_.empty()) {
        if (ctx_)
            log::warn("TLS file vanished; keeping the loaded client certificate", {{"file", missing_}});
        else
            log::warn("health checks paused: no client certificate yet (kubelet TLS bootstrap?); connections go "
                      "to every endpoint until it appears",
                      {{"missing", missing_}});
        return;
    }
    log::error(ctx_ ? "cannot load new TLS files; keeping the previous ones" : "cannot load TLS files",
               {{"error", error_}});
}

SSL_CTX* TlsClientContext::refresh(uint64_t now_ms) {
    if (stamped_ && now_ms - last_check_ms_ < 1000) return ctx_;
    last_check_ms_ = now_ms;
    FileStamp c = FileStamp::of(cert_), k = FileStamp::of(key_), a = FileStamp::of(ca_);
    if (stamped_ && c == cert_st_ && k == key_st_ && a == ca_st_) return ctx_;
    const bool first = ctx_ == nullptr, had_error = !error_.empty();
    const std::string subject = subject_;
    const int64_t not_after = not_after_;
    switch (load(now_ms)) {
    case Load::missing: log_not_loaded(); break;
    case Load::failed:
        warn_if_key_exposed(key_);
        log_not_loaded();
        break;
    case Load::same:
        warn_if_key_exposed(key_);
        if (had_error)
            log::info("TLS files load as the certificate in use again", {{"cert", cert_}, {"subject", subject_}});
        break;
    case Load::built: log_loaded(first, subject != subject_ || not_after != not_after_); break;
    }
    return ctx_;
}

}  // namespace kprism
