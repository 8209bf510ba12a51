// SPDX-License-Identifier: Apache-2.0
// The probes' TLS context (kprism/upstreams/tls_context.h): a new context, and a new generation
// (which drops every kept probe connection), only for new content of the files; a reload's load
// of other paths, and what it reports when they do not load.
#include "kprism/upstreams/tls_context.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>

namespace kprism {
namespace {

// A self-signed certificate for `cn` and its key, as one PEM (kubelet's form); its own CA.
std::string self_signed(const std::string& cn) {
    EVP_PKEY* pkey = EVP_EC_gen("P-256");
    X509* x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), static_cast<long>(std::hash<std::string>{}(cn) & 0x7fffffff));
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, pkey);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(x, name);
    X509_sign(x, pkey, EVP_sha256());
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, x);
    PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    std::string pem(data, static_cast<size_t>(n));
    BIO_free(bio);
    X509_free(x);
    EVP_PKEY_free(pkey);
    return pem;
}

class TlsContextTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir = ::testing::TempDir() + "kprism-tls-context-" + std::to_string(getpid());
        ::mkdir(dir.c_str(), 0700);
        one = self_signed("system:node:one");
        cert = dir + "/cert.pem";
        ca = dir + "/ca.pem";
        put(cert, one);
        put(ca, one);
    }
    void TearDown() override {
        for (const char* f : {"/cert.pem", "/ca.pem", "/copy.pem", "/garbage.pem", "/x.tmp"})
            ::unlink((dir + f).c_str());
        ::rmdir(dir.c_str());
    }
    // Written whole under another name, then renamed over: a new inode, as kubelet writes.
    void put(const std::string& path, const std::string& bytes) {
        std::ofstream(dir + "/x.tmp", std::ios::binary) << bytes;
        ASSERT_EQ(std::rename((dir + "/x.tmp").c_str(), path.c_str()), 0);
    }
    std::string dir, cert, ca, one;
    uint64_t now = 10000;
    // Past refresh()'s once-a-second look.
    SSL_CTX* later(TlsClientContext& t) { return t.refresh(now += 1500); }
};

TEST_F(TlsContextTest, OnlyNewContentBuildsANewContext) {
    TlsClientContext t(cert, cert, ca);
    SSL_CTX* first = later(t);
    ASSERT_NE(first, nullptr) << t.last_error();
    const uint64_t gen = t.generation();
    EXPECT_NE(gen, 0u);
    EXPECT_EQ(t.subject(), "/CN=system:node:one");

    // A new modification time, the same bytes as a new file, a forced look (SIGHUP): nothing.
    struct timespec ts[2] = {{0, UTIME_OMIT}, {std::time(nullptr) + 60, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, cert.c_str(), ts, 0), 0);
    EXPECT_EQ(later(t), first);
    put(cert, one);
    EXPECT_EQ(later(t), first);
    t.reread();
    EXPECT_EQ(t.refresh(now), first);
    EXPECT_EQ(t.generation(), gen);

    // New bytes: a new context, a new generation.
    put(cert, self_signed("system:node:two"));
    SSL_CTX* second = later(t);
    EXPECT_NE(second, first);
    EXPECT_GT(t.generation(), gen);
    EXPECT_EQ(t.subject(), "/CN=system:node:two");

    // Bytes that do not load, or no file: the context in use stays, the error says why.
    const uint64_t gen2 = t.generation();
    put(cert, "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n");
    EXPECT_EQ(later(t), second);
    EXPECT_EQ(t.last_error().rfind("client certificate " + cert + ": ", 0), 0u) << t.last_error();
    ::unlink(cert.c_str());
    EXPECT_EQ(later(t), second);
    EXPECT_EQ(t.last_error(), "client certificate " + cert + " does not exist");
    EXPECT_EQ(t.generation(), gen2);
}

TEST_F(TlsContextTest, AReloadsLoadOfOtherPaths) {
    TlsClientContext in_use(cert, cert, ca);
    ASSERT_NE(later(in_use), nullptr);
    const uint64_t gen = in_use.generation();

    // Another path, the same bytes: the same content, so the context in use takes the paths.
    const std::string copy = dir + "/copy.pem";
    put(copy, one);
    TlsClientContext same(copy, copy, ca);
    ASSERT_TRUE(same.load_now(now));
    EXPECT_TRUE(same.same_content(in_use));
    SSL_CTX* ctx = in_use.get();
    in_use.take_paths(same);
    EXPECT_EQ(in_use.get(), ctx);
    EXPECT_EQ(in_use.generation(), gen);
    ::unlink(cert.c_str());  // the old path no longer matters
    EXPECT_EQ(later(in_use), ctx);
    EXPECT_TRUE(in_use.last_error().empty()) << in_use.last_error();

    // Another path that does not load: false, the file and the loader's error.
    TlsClientContext missing(dir + "/none.pem", dir + "/none.pem", ca);
    EXPECT_FALSE(missing.load_now(now));
    EXPECT_EQ(missing.get(), nullptr);
    EXPECT_EQ(missing.last_error(), "client certificate " + dir + "/none.pem does not exist");
    const std::string garbage = dir + "/garbage.pem";
    put(garbage, "not PEM\n");
    TlsClientContext bad(copy, garbage, ca);
    EXPECT_FALSE(bad.load_now(now));
    EXPECT_EQ(bad.last_error().rfind("client key " + garbage + ": error:", 0), 0u) << bad.last_error();

    // Other bytes: not the same content.
    put(garbage, self_signed("system:node:three"));
    TlsClientContext other(garbage, garbage, ca);
    ASSERT_TRUE(other.load_now(now)) << other.last_error();
    EXPECT_FALSE(other.same_content(in_use));
    EXPECT_NE(other.generation(), in_use.generation());
}

}  // namespace
}  // namespace kprism
