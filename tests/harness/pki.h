// SPDX-License-Identifier: Apache-2.0
// Test PKI generated at test time with the OpenSSL 3 C API (no `openssl` CLI): a cluster CA, an
// apiserver certificate, kubelet-style client certificates (good, untrusted, expired) and a second
// CA that signed nothing the server uses. All keys are EC P-256; all files are PEM in a temp dir.
#pragma once

#include <memory>
#include <string>

namespace it {

struct Pki {
    Pki();   // creates a fresh temp dir (mkdtemp /tmp/kprism-pki-XXXXXX) and everything below
    ~Pki();  // removes the dir (unless env KPRISM_KEEP_LOGS is set)
    Pki(const Pki&) = delete;
    Pki& operator=(const Pki&) = delete;

    std::string dir;
    std::string ca_cert;                  // cluster CA (CA:TRUE) PEM
    std::string server_cert, server_key;  // signed by ca; SAN IP:127.0.0.1, IP:::1, DNS:localhost, DNS:kubernetes,
                                          // DNS:api.kprism.test (tests/harness/dns.h)
    std::string wrong_name_server_cert, wrong_name_server_key;  // signed by ca, SAN only DNS:elsewhere.example
    std::string client_pem;    // cert + key in ONE file (like kubelet-client-current.pem), CN=system:node:test
    std::string client_cert, client_key;  // the same identity as two separate files
    std::string untrusted_client_pem;     // cert+key signed by another CA (other_ca)
    std::string expired_client_pem;       // signed by ca, notBefore now-2d, notAfter now-1d
    std::string other_ca_cert;            // a CA that signed nothing the server uses

    // Issues a client cert+key (CN=cn, O=system:nodes, clientAuth) into `path` as one PEM file,
    // written to path.tmp then rename(2)d so readers never see half a file. Offsets are seconds
    // from now. trusted=false signs it with other_ca instead of ca. Throws std::runtime_error.
    void issue_client(const std::string& path, const std::string& cn, long not_before_offset_s = -3600,
                      long not_after_offset_s = 365L * 86400, bool trusted = true);

    // notAfter of the first certificate in a PEM file, as a time_t; -1 if unreadable.
    static long long not_after(const std::string& cert_path);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace it
