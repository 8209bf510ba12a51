// SPDX-License-Identifier: Apache-2.0
// Fuzzes TlsClientContext::build (src/upstreams/tls_context.cc): loading the probes' client cert, key and CA from PEM files.
//
// Input: NUL-separated parts, written to in-memory files (memfd) that the loader opens by path:
//   one part       the same file as certificate, key and CA bundle
//   two parts      a certificate+key file (the kubelet's kubelet-client-current.pem), then the CA bundle
//   three or more  certificate (chain), key, CA bundle; further parts are appended to the bundle
// Checked: no crash, UB or leak (LeakSanitizer runs after each input); a context is returned with
// no error message or no context with one; the OpenSSL error queue is left empty on failure.
#include <openssl/err.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "kprism/upstreams/tls_context.h"

using kprism::TlsClientContext;

namespace {

struct MemFile {
    int fd = -1;
    std::string path;
    explicit MemFile(const char* name) {
        fd = memfd_create(name, 0);
        FUZZ_CHECK(fd >= 0);
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    void set(std::string_view content) {
        FUZZ_CHECK(ftruncate(fd, 0) == 0);
        size_t off = 0;
        while (off < content.size()) {
            ssize_t n = pwrite(fd, content.data() + off, content.size() - off, static_cast<off_t>(off));
            FUZZ_CHECK(n > 0);
            off += static_cast<size_t>(n);
        }
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static MemFile cert("fuzz-cert"), key("fuzz-key"), ca("fuzz-ca");
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string_view> parts;
    while (true) {
        size_t nul = in.find('\0');
        parts.push_back(in.substr(0, nul));
        if (nul == std::string_view::npos) break;
        in.remove_prefix(nul + 1);
    }
    std::string cert_path, key_path, ca_path;
    if (parts.size() == 1) {
        cert.set(parts[0]);
        cert_path = key_path = ca_path = cert.path;
    } else if (parts.size() == 2) {
        cert.set(parts[0]);
        ca.set(parts[1]);
        cert_path = key_path = cert.path;
        ca_path = ca.path;
    } else {
        cert.set(parts[0]);
        key.set(parts[1]);
        std::string bundle(parts[2]);
        for (size_t i = 3; i < parts.size(); ++i) bundle.append(parts[i]);
        ca.set(bundle);
        cert_path = cert.path;
        key_path = key.path;
        ca_path = ca.path;
    }

    std::string err, subject;
    int64_t not_after = -1;
    SSL_CTX* ctx = TlsClientContext::build(cert_path, key_path, ca_path, &err, &subject, &not_after);
    if (ctx) {
        FUZZ_CHECK(err.empty());
        FUZZ_CHECK(SSL_CTX_get0_certificate(ctx) != nullptr);
        FUZZ_CHECK(not_after != -1);  // set, 0 when the time does not convert
        SSL_CTX_free(ctx);
    } else {
        FUZZ_CHECK(!err.empty());
        FUZZ_CHECK(ERR_peek_error() == 0);  // openssl_error() drained the queue
    }
    ERR_clear_error();
    return 0;
}
