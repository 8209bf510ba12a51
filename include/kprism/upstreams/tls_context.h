// SPDX-License-Identifier: Apache-2.0
// The health checker's TLS client context: kubelet's client certificate, the cluster CA, and
// reloading both when the files change (kubelet rotates its certificate by re-pointing a symlink).
#pragma once

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace kprism {

// What identifies a file's content without reading it: device, inode (after following
// symlinks), size and modification time.
struct FileStamp {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
    static FileStamp of(const std::string& path);
};

// Owns one SSL_CTX at a time. refresh() re-stats the three files (at most once a second) and
// builds a new context when any changed; a context that fails to build leaves the previous one in
// use. Each successful build bumps generation() so callers drop TLS sessions of older identities.
class TlsClientContext {
public:
    TlsClientContext(std::string cert, std::string key, std::string ca);
    ~TlsClientContext();
    TlsClientContext(const TlsClientContext&) = delete;
    TlsClientContext& operator=(const TlsClientContext&) = delete;

    // Returns the context to use now, or nullptr while none could be built yet.
    SSL_CTX* refresh(uint64_t now_ms);
    SSL_CTX* get() const { return ctx_; }
    // Forces the next refresh() to rebuild from the files even if they look unchanged (SIGHUP).
    void reread() {
        stamped_ = false;
        last_check_ms_ = 0;
    }
    uint64_t generation() const { return generation_; }

    const std::string& subject() const { return subject_; }
    int64_t not_after() const { return not_after_; }  // unix time, 0 if unknown
    const std::string& last_error() const { return error_; }

    // Builds a context from the files now (no logging); nullptr and *err on failure. For tests.
    static SSL_CTX* build(const std::string& cert, const std::string& key, const std::string& ca, std::string* err,
                          std::string* subject = nullptr, int64_t* not_after = nullptr);

private:
    std::string cert_, key_, ca_;
    FileStamp cert_st_, key_st_, ca_st_;
    bool stamped_ = false;
    SSL_CTX* ctx_ = nullptr;
    uint64_t generation_ = 0;
    uint64_t last_check_ms_ = 0;
    std::string subject_;
    int64_t not_after_ = 0;
    std::string error_;
};

// The newest OpenSSL error queue entry as text, and clears the queue.
std::string openssl_error();

}  // namespace kprism
