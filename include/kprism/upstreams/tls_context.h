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

// The largest certificate, key or CA file read (a CA bundle of every public root is about
// 220 KiB): past it, or not a regular file, the set does not load.
constexpr uint64_t kMaxTlsFileBytes = 1024 * 1024;

// Owns one SSL_CTX at a time. refresh() re-stats the three files (at most once a second) and,
// when any changed, compares their content (SHA-256 of each file's bytes) with the content the
// context was built from: only different content builds a new context (a touched file, or a
// rewrite with the same bytes, changes nothing). A context that fails to build leaves the
// previous one in use. Each successful build bumps generation() so callers drop TLS sessions
// (and kept connections) of older identities; nothing else does.
class TlsClientContext {
public:
    TlsClientContext(std::string cert, std::string key, std::string ca);
    ~TlsClientContext();
    TlsClientContext(const TlsClientContext&) = delete;
    TlsClientContext& operator=(const TlsClientContext&) = delete;

    // Returns the context to use now, or nullptr while none could be built yet.
    SSL_CTX* refresh(uint64_t now_ms);
    SSL_CTX* get() const { return ctx_; }
    // Makes the next refresh() look at the files now, past the once-a-second limit, even if they
    // look unchanged (SIGHUP); it still builds a new context only for different content.
    void reread() {
        stamped_ = false;
        last_check_ms_ = 0;
    }
    uint64_t generation() const { return generation_; }

    // Reload, before anything is applied: loads the files now, without logging. False, with
    // last_error() naming the file and the loader's error, when they do not load.
    bool load_now(uint64_t now_ms);
    // The SHA-256 of each of the three files the context in use was built from (cert, key, CA),
    // in hex; "" without one.
    std::string content_hex() const;
    // Both hold a context built from the same bytes of the three files.
    bool same_content(const TlsClientContext& other) const {
        return ctx_ && other.ctx_ && digest_ == other.digest_;
    }
    // Takes the paths (and what was seen of the files) of `other`, which holds the same content:
    // this context, its generation and so every kept probe connection stay.
    void take_paths(const TlsClientContext& other);
    // The log line of a context just built (by refresh(), or load_now() once applied): "client
    // certificate loaded" for the `first`, "client certificate rotated" when the subject or the
    // expiry changed, else "TLS files reloaded"; and the key's permission warning.
    void log_loaded(bool first, bool rotated) const;
    // The log line of files that did not load: "health checks paused" (a file is missing) or
    // "cannot load TLS files" without a context in use; with one, that it stays.
    void log_not_loaded() const;

    const std::string& subject() const { return subject_; }
    int64_t not_after() const { return not_after_; }  // unix time, 0 if unknown
    const std::string& last_error() const { return error_; }

    // Builds a context from the files now (no logging); nullptr and *err on failure. For tests.
    static SSL_CTX* build(const std::string& cert, const std::string& key, const std::string& ca, std::string* err,
                          std::string* subject = nullptr, int64_t* not_after = nullptr);

private:
    enum class Load { built, same, failed, missing };
    // Reads the files' digest and builds a context when it differs from the one in use; sets
    // error_ and the stamps. No logging.
    Load load(uint64_t now_ms);

    std::string cert_, key_, ca_;
    FileStamp cert_st_, key_st_, ca_st_;
    bool stamped_ = false;
    SSL_CTX* ctx_ = nullptr;
    std::string digest_;  // SHA-256 of the cert, key and CA files ctx_ was built from
    uint64_t generation_ = 0;
    uint64_t last_check_ms_ = 0;
    std::string subject_;
    int64_t not_after_ = 0;
    std::string error_;
    std::string missing_;  // the path that did not exist at the last load, if any
};

// The newest OpenSSL error queue entry as text, and clears the queue.
std::string openssl_error();

}  // namespace kprism
