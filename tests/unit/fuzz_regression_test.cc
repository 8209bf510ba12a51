// SPDX-License-Identifier: Apache-2.0
// Regression tests for what the fuzz targets (tests/fuzz) found, each fed through the same function.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kprism/config/config.h"
#include "kprism/upstreams/tls_context.h"

namespace kprism {
namespace {

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += "\n  " + s;
    return out;
}

// config_fuzz: toml++ 3.3 reached __builtin_unreachable() (undefined behaviour; under UBSan a crash)
// for a non-whitespace code point such as U+03FB, U+00E9 or U+00A7 where it looks for whitespace.
// Each must be an ordinary "invalid TOML" error, or parse as TOML says.
TEST(FuzzRegression, TomlNonAsciiWhereWhitespaceMayBe) {
    CommandLine cl;
    cl.command = Command::check;
    for (std::string_view doc : {std::string_view("\xcf\xbbt"),                        // config_fuzz crash input
                                 std::string_view("endpoints = [\"10.0.0.1:6443\"] \xc3\xa9\n"),  // after a value
                                 std::string_view("\xc2\xa7 = 1\n")}) {
        Config c;
        std::vector<std::string> errors;
        EXPECT_FALSE(load_config_text(doc, "fuzz.toml", cl, c, errors));
        ASSERT_EQ(errors.size(), 1u) << joined(errors);
        EXPECT_EQ(errors[0].rfind("fuzz.toml:1:", 0), 0u) << errors[0];
        EXPECT_NE(errors[0].find("invalid TOML"), std::string::npos) << errors[0];
    }
    // After a line-ending backslash in a multi-line string (marzer/tomlplusplus#190): valid TOML, and
    // the character is kept (it is not whitespace to trim).
    Config c;
    std::vector<std::string> errors;
    ASSERT_TRUE(load_config_text("endpoints = [\"10.0.0.1:6443\"]\nzone = \"\"\"\\\n    \xc2\xa7zone\"\"\"\n",
                                 "fuzz.toml", cl, c, errors))
        << joined(errors);
    EXPECT_EQ(c.s.zone, "\xc2\xa7zone");
}

// config_fuzz: toml++ 3.3 asserts (abort) on an array closed by '}', as a typo in an endpoints
// list makes it: `kprism check`, the daemon's start and its SIGHUP reload died of it. Each must be
// an ordinary "invalid TOML" error naming the file.
TEST(FuzzRegression, TomlArrayClosedByBraceIsAnError) {
    CommandLine cl;
    cl.command = Command::check;
    for (std::string_view doc : {std::string_view("endpoints = [\n  \"10.0.0.1:6443\",\n}\n"),
                                 std::string_view("endpoints = [\"10.0.0.1:6443\" }\n"),
                                 std::string_view("a = [1,}"), std::string_view("a = [}"),
                                 std::string_view("endpoints = [ { address = \"10.0.0.1:6443\" }, }\n")}) {
        Config c;
        std::vector<std::string> errors;
        EXPECT_FALSE(load_config_text(doc, "fuzz.toml", cl, c, errors)) << doc;
        ASSERT_EQ(errors.size(), 1u) << joined(errors);
        EXPECT_EQ(errors[0].rfind("fuzz.toml:", 0), 0u) << errors[0];
        EXPECT_NE(errors[0].find("invalid TOML"), std::string::npos) << errors[0];
    }
}

// config_fuzz (round trip): a string holding DEL (U+007F, written "\u007f") was printed raw by
// `kprism check`, and TOML forbids that: the printed configuration did not load again.
TEST(FuzzRegression, RenderedDelLoadsAgain) {
    CommandLine cl;
    cl.command = Command::check;
    Config c, back;
    std::vector<std::string> errors;
    ASSERT_TRUE(load_config_text("endpoints = [\"10.0.0.1:6443\"]\nzone = \"a\\u007fb\"\n", "fuzz.toml", cl, c, errors))
        << joined(errors);
    EXPECT_EQ(c.s.zone, "a\x7f" "b");
    std::string rendered = render_config(c);
    EXPECT_NE(rendered.find("zone = \"a\\u007fb\""), std::string::npos) << rendered;
    ASSERT_TRUE(load_config_text(rendered, "rendered.toml", cl, back, errors)) << joined(errors) << "\n" << rendered;
    EXPECT_EQ(back.s.zone, c.s.zone);
}

// config_fuzz (round trip): the --config file name is printed in comments, raw; one that is not
// UTF-8 (crash input: bytes 0xff) or holds a newline made the printed configuration invalid TOML.
TEST(FuzzRegression, RenderedFileNameLoadsAgain) {
    CommandLine cl;
    cl.command = Command::check;
    const std::string name = "/etc/kprism/kp\xff\xffrism.toml\nendpoints = []\x01";
    Config c, back;
    std::vector<std::string> errors;
    ASSERT_TRUE(load_config_text("endpoints = [\"10.0.0.1:6443\"]\n", name, cl, c, errors)) << joined(errors);
    std::string rendered = render_config(c);
    EXPECT_NE(rendered.find("(file /etc/kprism/kp??rism.toml?endpoints = []?)\n"), std::string::npos) << rendered;
    EXPECT_NE(rendered.find("  # /etc/kprism/kp??rism.toml?endpoints = []?:1\n"), std::string::npos) << rendered;
    ASSERT_TRUE(load_config_text(rendered, "rendered.toml", cl, back, errors)) << joined(errors) << "\n" << rendered;
    ASSERT_EQ(back.s.endpoints, c.s.endpoints);
    // Valid UTF-8 and tabs stay as they are.
    ASSERT_TRUE(load_config_text("endpoints = [\"10.0.0.1:6443\"]\n", "/etc/k\xc3\xa9\tp.toml", cl, c, errors));
    EXPECT_NE(render_config(c).find("(file /etc/k\xc3\xa9\tp.toml)"), std::string::npos) << render_config(c);
}

// config_fuzz (the harness, crash input `reload\0`): `kprism reload` with no configuration loads
// (it reads health.* only, to reach the running daemon) with no endpoints, as `kprism status` does;
// the harness had held it to the rules of a configuration that runs.
TEST(FuzzRegression, ReloadCommandNeedsNoEndpoints) {
    for (const char* command : {"reload", "status"}) {
        const char* argv[] = {"kprism", command, nullptr};
        CommandLine cl;
        std::vector<std::string> errors;
        ASSERT_TRUE(parse_command_line(2, argv, cl, errors)) << joined(errors);
        Config c;
        ASSERT_TRUE(load_config(cl, c, errors)) << command << ": " << joined(errors);
        EXPECT_TRUE(c.endpoints.empty()) << command;
    }
}

// Throwaway test material (generated for these tests, protects nothing): a client certificate, its
// EC P-256 key in clear and encrypted (PKCS#8, pass phrase "throwaway"), and the CA that signed it.
const char* const kThrowawayCert =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBujCCAWCgAwIBAgIBAjAKBggqhkjOPQQDAjAoMSYwJAYDVQQDDB1rcHJpc20t\n"
    "ZnV6ei1USFJPV0FXQVktdGVzdC1DQTAeFw0yNjEyMDExMDMyMDJaFw0zNjExMjgx\n"
    "MDMyMDJaMDwxFTATBgNVBAoMDHN5c3RlbTpub2RlczEjMCEGA1UEAwwac3lzdGVt\n"
    "Om5vZGU6ZnV6ei10aHJvd2F3YXkwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATt\n"
    "YugFAbuWSJ0jBrUSGv3qqkLV89MC6dvm6MrtJ8SYTDpcv8p0wYoszCJU0UpGnW72\n"
    "PGk7FnjtHdgrmTH5Xs/Fo2cwZTATBgNVHSUEDDAKBggrBgEFBQcDAjAOBgNVHQ8B\n"
    "Af8EBAMCB4AwHQYDVR0OBBYEFNhkzQGgRF4BDzYyhCK0o5lGjdTcMB8GA1UdIwQY\n"
    "MBaAFCmgQuijYyb7SspRUXGrLwaQA30ZMAoGCCqGSM49BAMCA0gAMEUCIQDhMfZf\n"
    "NC5zOqluQ/coQGDUX46+m5Ag2aj80WrPNkFk6gIgfHWeq9Dgr/kPPAC+PPa9C4mw\n"
    "LTmI1ZVGKUHbGmsZpCg=\n"
    "-----END CERTIFICATE-----\n";
const char* const kThrowawayKey =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgnJPMinbyJSiItDuv\n"
    "D3PmF2vDBnhBDL00oS/GZzJoSxuhRANCAATtYugFAbuWSJ0jBrUSGv3qqkLV89MC\n"
    "6dvm6MrtJ8SYTDpcv8p0wYoszCJU0UpGnW72PGk7FnjtHdgrmTH5Xs/F\n"
    "-----END PRIVATE KEY-----\n";
const char* const kThrowawayKeyEncrypted =
    "-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
    "MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAhcz/tqNTOwIQICCAAw\n"
    "DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEOU0VekPu7qHEEJv5rBP+wcEgZDz\n"
    "rPtHy3meD9UlF/rhEzk1SqYQKu0wjzlmJB6GQKwqh9QlvG9YA5HCYnxyC7ciRJFj\n"
    "aGu16RW2Ojn/khXiTyLgMvCUdlzfK1H6Fvmh3HRgKrCb4NhrKPEzDDBkhQWYZFE1\n"
    "i/qRqauYOCNZy+8ZIuTVM3nM6diwCTiAANghST6Lju6Qhhi/+5x5e/wBdEQON0Y=\n"
    "-----END ENCRYPTED PRIVATE KEY-----\n";
const char* const kThrowawayCa =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkTCCATigAwIBAgIBATAKBggqhkjOPQQDAjAoMSYwJAYDVQQDDB1rcHJpc20t\n"
    "ZnV6ei1USFJPV0FXQVktdGVzdC1DQTAeFw0yNjEyMDExMDMyMDJaFw0zNjExMjgx\n"
    "MDMyMDJaMCgxJjAkBgNVBAMMHWtwcmlzbS1mdXp6LVRIUk9XQVdBWS10ZXN0LUNB\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEo5CEVnL2jFx2HdVodkBEPGiWpVDS\n"
    "Zr3GivDPBiCBqc5OMPPn85VV4EEGYEovBMaE7uWjU7Nr77N20GRBdg4HaKNTMFEw\n"
    "HQYDVR0OBBYEFCmgQuijYyb7SspRUXGrLwaQA30ZMB8GA1UdIwQYMBaAFCmgQuij\n"
    "Yyb7SspRUXGrLwaQA30ZMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAw\n"
    "RAIgFGGtFINmr8JjDfinwyEyR7Pr6wgiobGeK9V4NT2MXpECIFo/Y1BTxMkLeZq6\n"
    "WvkubuilVzbj3Uvt3ocSmQaKSgqE\n"
    "-----END CERTIFICATE-----\n";

std::string write_temp(const std::string& name, const std::string& content) {
    std::string path = ::testing::TempDir() + "kprism-fuzz-regression-" + std::to_string(getpid()) + "-" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
}

// pem_fuzz: an encrypted key made OpenSSL's default password callback ask for a pass phrase on the
// terminal, or on standard input without one, blocking the event loop for as long as nobody
// answers. Loading must fail at once instead, with a message naming the key.
TEST(FuzzRegression, EncryptedKeyFailsWithoutPrompting) {
    std::string cert = write_temp("cert.pem", kThrowawayCert), key = write_temp("key.pem", kThrowawayKey),
                enc = write_temp("key-enc.pem", kThrowawayKeyEncrypted), ca = write_temp("ca.pem", kThrowawayCa);
    std::string err;
    SSL_CTX* ok = TlsClientContext::build(cert, key, ca, &err);
    ASSERT_NE(ok, nullptr) << "the clear key loads: " << err;
    SSL_CTX_free(ok);

    // In a child without a terminal whose standard input stays open and silent, as a daemon's may.
    int in[2];
    ASSERT_EQ(pipe(in), 0);
    fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        setsid();  // no controlling terminal: /dev/tty cannot be opened
        dup2(in[0], 0);
        std::string e;
        SSL_CTX* ctx = TlsClientContext::build(cert, enc, ca, &e);
        _exit(ctx ? 3 : e.find("client key " + enc) == 0 ? 0 : 4);
    }
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 100 && done == 0; ++i) {
        done = waitpid(pid, &status, WNOHANG);
        if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    close(in[0]);
    close(in[1]);
    for (const auto& p : {cert, key, enc, ca}) std::remove(p.c_str());
    ASSERT_NE(done, 0) << "build() still waits for a pass phrase after 5 s";
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the encrypted key loaded; 4: the error does not name the key";
}

}  // namespace
}  // namespace kprism
