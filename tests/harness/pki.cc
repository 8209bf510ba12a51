// SPDX-License-Identifier: Apache-2.0
// Test PKI with the OpenSSL 3 C API: EC P-256 keys, X509v3 certificates with extensions, PEM files.
#include "harness/pki.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

namespace it {

namespace {

struct KeyFree {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
    void operator()(X509* x) const { X509_free(x); }
};
struct BioFree {
    void operator()(BIO* b) const { BIO_free(b); }
};
struct ExtFree {
    void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct BnFree {
    void operator()(BIGNUM* b) const { BN_free(b); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;
using Bio = std::unique_ptr<BIO, BioFree>;

[[noreturn]] void fail(const std::string& what) {
    std::string msg = "pki: " + what;
    char buf[256];
    while (unsigned long e = ERR_get_error()) {
        ERR_error_string_n(e, buf, sizeof buf);
        msg += std::string(": ") + buf;
    }
    throw std::runtime_error(msg);
}

Key ec_key() {
    Key k(EVP_EC_gen("P-256"));
    if (!k) fail("EVP_EC_gen P-256");
    return k;
}

void add_name(X509_NAME* n, const char* field, const std::string& value) {
    if (!X509_NAME_add_entry_by_txt(n, field, MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(value.c_str()),
                                    -1, -1, 0))
        fail(std::string("X509_NAME_add_entry_by_txt ") + field);
}

void add_ext(X509* x, X509V3_CTX* ctx, int nid, const char* value) {
    std::unique_ptr<X509_EXTENSION, ExtFree> e(X509V3_EXT_nconf_nid(nullptr, ctx, nid, value));
    if (!e || !X509_add_ext(x, e.get(), -1)) fail(std::string("extension ") + OBJ_nid2sn(nid) + "=" + value);
}

struct Spec {
    std::string cn;
    std::string org;             // empty: none
    bool ca = false;
    std::string san;             // X509v3 config syntax, empty: none
    std::string eku;             // "serverAuth" / "clientAuth" / empty
    long not_before = -3600;     // seconds from now
    long not_after = 365L * 86400;
};

// Issues a certificate for `key` described by `s`, signed by issuer/issuer_key (self-signed if
// issuer is null).
Cert make_cert(const Spec& s, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
    Cert x(X509_new());
    if (!x) fail("X509_new");
    if (!X509_set_version(x.get(), X509_VERSION_3)) fail("X509_set_version");

    unsigned char serial[16];
    if (RAND_bytes(serial, sizeof serial) != 1) fail("RAND_bytes");
    serial[0] &= 0x7f;  // positive
    serial[0] |= 0x01;  // and 16 bytes long
    std::unique_ptr<BIGNUM, BnFree> bn(BN_bin2bn(serial, sizeof serial, nullptr));
    if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x.get()))) fail("serial");

    if (!X509_gmtime_adj(X509_getm_notBefore(x.get()), s.not_before) ||
        !X509_gmtime_adj(X509_getm_notAfter(x.get()), s.not_after))
        fail("validity");

    X509_NAME* name = X509_get_subject_name(x.get());
    if (!s.org.empty()) add_name(name, "O", s.org);
    add_name(name, "CN", s.cn);
    if (!X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name)) fail("issuer name");
    if (!X509_set_pubkey(x.get(), key)) fail("X509_set_pubkey");

    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : x.get(), x.get(), nullptr, nullptr, 0);
    if (s.ca) {
        add_ext(x.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(x.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
    } else {
        add_ext(x.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(x.get(), &ctx, NID_key_usage, "critical,digitalSignature");
    }
    if (!s.eku.empty()) add_ext(x.get(), &ctx, NID_ext_key_usage, s.eku.c_str());
    add_ext(x.get(), &ctx, NID_subject_key_identifier, "hash");
    add_ext(x.get(), &ctx, NID_authority_key_identifier, "keyid:always");
    if (!s.san.empty()) add_ext(x.get(), &ctx, NID_subject_alt_name, s.san.c_str());

    if (X509_sign(x.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0) fail("X509_sign " + s.cn);
    return x;
}

std::string cert_pem(X509* x) {
    Bio b(BIO_new(BIO_s_mem()));
    if (!b || !PEM_write_bio_X509(b.get(), x)) fail("PEM_write_bio_X509");
    char* p = nullptr;
    long n = BIO_get_mem_data(b.get(), &p);
    return std::string(p, static_cast<size_t>(n));
}

// PKCS#8 ("BEGIN PRIVATE KEY") or, with traditional, SEC1 ("BEGIN EC PRIVATE KEY") as the kubelet
// writes into kubelet-client-current.pem.
std::string key_pem(EVP_PKEY* k, bool traditional) {
    Bio b(BIO_new(BIO_s_mem()));
    int ok = b ? (traditional ? PEM_write_bio_PrivateKey_traditional(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr)
                              : PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr))
               : 0;
    if (!ok) fail("PEM_write_bio_PrivateKey");
    char* p = nullptr;
    long n = BIO_get_mem_data(b.get(), &p);
    return std::string(p, static_cast<size_t>(n));
}

// Writes path.tmp and renames it over path. Keys are 0600, certificates 0644.
void write_file(const std::string& path, const std::string& data, mode_t mode = 0600) {
    std::string tmp = path + ".tmp";
    ::unlink(tmp.c_str());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) throw std::runtime_error("pki: open " + tmp + ": " + strerror(errno));
    size_t off = 0;
    while (off < data.size()) {
        ssize_t w = ::write(fd, data.data() + off, data.size() - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw std::runtime_error("pki: write " + tmp + ": " + strerror(e));
        }
        off += static_cast<size_t>(w);
    }
    bool ok = ::fchmod(fd, mode) == 0;  // exactly `mode`, whatever the umask
    int e = errno;
    if (::close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        ::unlink(tmp.c_str());
        throw std::runtime_error("pki: write " + path + ": " + strerror(e));
    }
}

}  // namespace

struct Pki::Impl {
    Key ca_key, other_ca_key;
    Cert ca, other_ca;
};

Pki::Pki() : impl_(std::make_unique<Impl>()) {
    char tmpl[] = "/tmp/kprism-pki-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("pki: mkdtemp: ") + strerror(errno));
    dir = tmpl;
    try {
        auto& im = *impl_;
        im.ca_key = ec_key();
        im.ca = make_cert({.cn = "kubernetes", .ca = true, .not_after = 10L * 365 * 86400}, im.ca_key.get(), nullptr,
                          nullptr);
        ca_cert = dir + "/ca.crt";
        write_file(ca_cert, cert_pem(im.ca.get()), 0644);

        im.other_ca_key = ec_key();
        im.other_ca = make_cert({.cn = "other-ca", .ca = true, .not_after = 10L * 365 * 86400},
                                im.other_ca_key.get(), nullptr, nullptr);
        other_ca_cert = dir + "/other-ca.crt";
        write_file(other_ca_cert, cert_pem(im.other_ca.get()), 0644);

        auto server = [&](const std::string& name, const std::string& san, std::string& cert_path,
                          std::string& key_path) {
            Key k = ec_key();
            Cert c = make_cert({.cn = "kube-apiserver", .san = san, .eku = "serverAuth"}, k.get(), im.ca.get(),
                               im.ca_key.get());
            cert_path = dir + "/" + name + ".crt";
            key_path = dir + "/" + name + ".key";
            write_file(cert_path, cert_pem(c.get()), 0644);
            write_file(key_path, key_pem(k.get(), false));
        };
        server("apiserver", "IP:127.0.0.1,IP:::1,DNS:localhost,DNS:kubernetes,DNS:api.kprism.test", server_cert, server_key);
        server("wrong-name", "DNS:elsewhere.example", wrong_name_server_cert, wrong_name_server_key);

        {
            Key k = ec_key();
            Cert c = make_cert({.cn = "system:node:test", .org = "system:nodes", .eku = "clientAuth"}, k.get(),
                               im.ca.get(), im.ca_key.get());
            std::string cp = cert_pem(c.get()), kp = key_pem(k.get(), true);
            client_pem = dir + "/kubelet-client-current.pem";
            client_cert = dir + "/client.crt";
            client_key = dir + "/client.key";
            write_file(client_pem, cp + kp);
            write_file(client_cert, cp, 0644);
            write_file(client_key, kp);
        }
        untrusted_client_pem = dir + "/untrusted-client.pem";
        issue_client(untrusted_client_pem, "system:node:test", -3600, 365L * 86400, false);
        expired_client_pem = dir + "/expired-client.pem";
        issue_client(expired_client_pem, "system:node:test", -2L * 86400, -1L * 86400, true);
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        throw;
    }
}

Pki::~Pki() {
    if (dir.empty() || getenv("KPRISM_KEEP_LOGS")) return;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

void Pki::issue_client(const std::string& path, const std::string& cn, long not_before_offset_s,
                       long not_after_offset_s, bool trusted) {
    auto& im = *impl_;
    Key k = ec_key();
    Cert c = make_cert({.cn = cn,
                        .org = "system:nodes",
                        .eku = "clientAuth",
                        .not_before = not_before_offset_s,
                        .not_after = not_after_offset_s},
                       k.get(), trusted ? im.ca.get() : im.other_ca.get(),
                       trusted ? im.ca_key.get() : im.other_ca_key.get());
    write_file(path, cert_pem(c.get()) + key_pem(k.get(), true));
}

long long Pki::not_after(const std::string& cert_path) {
    Bio b(BIO_new_file(cert_path.c_str(), "r"));
    if (!b) {
        ERR_clear_error();
        return -1;
    }
    Cert x(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
    std::tm tm{};
    if (!x || !ASN1_TIME_to_tm(X509_get0_notAfter(x.get()), &tm)) {
        ERR_clear_error();
        return -1;
    }
    return static_cast<long long>(timegm(&tm));
}

}  // namespace it
