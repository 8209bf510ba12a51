// SPDX-License-Identifier: Apache-2.0
// The discovery snapshot: its format, every reason to ignore one, the atomic write.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kprism/discovery/snapshot.h"
#include "kprism/upstreams/upstream.h"

using namespace kprism;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char t[] = "/tmp/kprism-snap-XXXXXX";
        path = mkdtemp(t);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const char* name) const { return path + "/" + name; }
};

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

DiscoverySnapshot sample() {
    DiscoverySnapshot s;
    s.written_unix = 1'000'000;
    s.ca_sha256 = "ab12";
    HostPort a, b;
    EXPECT_TRUE(parse_host_port("10.0.0.1:6443", a, nullptr));
    EXPECT_TRUE(parse_host_port("[fd00::2]:443", b, nullptr));
    s.endpoints = {a, b};
    return s;
}

}  // namespace

TEST(DiscoverySnapshot, RoundTrip) {
    std::string text = render_snapshot(sample());
    EXPECT_EQ(text, R"({"kind":"kprism-discovery-snapshot","version":2,"written_unix":1000000,"ca_sha256":"ab12",)"
                    R"("endpoints":["10.0.0.1:6443","[fd00::2]:443"]})"
                    "\n");
    DiscoverySnapshot back;
    std::string err;
    ASSERT_TRUE(parse_snapshot(text, back, err)) << err;
    EXPECT_EQ(back.written_unix, 1'000'000);
    EXPECT_EQ(back.ca_sha256, "ab12");
    ASSERT_EQ(back.endpoints.size(), 2u);
    EXPECT_EQ(back.endpoints[1].str(), "[fd00::2]:443");
    EXPECT_TRUE(back.checked);
}

// Version 1 listed every admitted endpoint, checked or not: still read, its endpoints unchecked.
TEST(DiscoverySnapshot, VersionOneIsReadAsUnchecked) {
    DiscoverySnapshot back;
    std::string err;
    ASSERT_TRUE(parse_snapshot(R"({"kind":"kprism-discovery-snapshot","version":1,"written_unix":5,"ca_sha256":"ab",)"
                               R"("endpoints":["10.0.0.1:6443"]})",
                               back, err))
        << err;
    EXPECT_FALSE(back.checked);
    ASSERT_EQ(back.endpoints.size(), 1u);
    EXPECT_EQ(back.endpoints[0].str(), "10.0.0.1:6443");
}

TEST(DiscoverySnapshot, BadFormsAreRefusedWithAReason) {
    const std::string ok = render_snapshot(sample());
    struct Case {
        std::string text, reason;
    } cases[] = {
        {ok.substr(0, ok.size() / 2), "not JSON"},
        {"\x01\x02\xff garbage", "not JSON"},
        {"[]", "not a kprism-discovery-snapshot document"},
        {R"({"kind":"Other","version":1})", "not a kprism-discovery-snapshot document"},
        {R"({"kind":"kprism-discovery-snapshot","version":3,"written_unix":1,"ca_sha256":"","endpoints":[]})",
         "version is not 1 or 2"},
        {R"({"kind":"kprism-discovery-snapshot","version":1,"written_unix":"1","ca_sha256":"","endpoints":[]})",
         "wrong type"},
        {R"({"kind":"kprism-discovery-snapshot","version":1,"written_unix":1,"ca_sha256":"","endpoints":["api:6443"]})",
         "not an IP address"},
        {R"({"kind":"kprism-discovery-snapshot","version":1,"written_unix":1,"ca_sha256":"","endpoints":[7]})",
         "not an IP address"},
        {std::string(kMaxSnapshotBytes + 1, ' '), "larger than"},
        {std::string(100, '[') + std::string(100, ']'), "not JSON"},
    };
    for (const auto& c : cases) {
        DiscoverySnapshot s;
        std::string err;
        EXPECT_FALSE(parse_snapshot(c.text, s, err)) << c.text.substr(0, 80);
        EXPECT_NE(err.find(c.reason), std::string::npos) << err;
    }
    std::string many = R"({"kind":"kprism-discovery-snapshot","version":1,"written_unix":1,"ca_sha256":"","endpoints":[)";
    for (size_t i = 0; i <= kMaxDiscovered; ++i) many += (i ? "," : "") + std::string("\"10.0.0.") + std::to_string(i) + ":1\"";
    DiscoverySnapshot s;
    std::string err;
    EXPECT_FALSE(parse_snapshot(many + "]}", s, err));
    EXPECT_NE(err.find("more than 32"), std::string::npos) << err;
}

TEST(DiscoverySnapshot, LoadChecksCaAgeAndClock) {
    TempDir d;
    const std::string p = d.file("discovery.json");
    put(p, render_snapshot(sample()));
    const int64_t week = 7 * 86400;
    DiscoverySnapshot s;
    std::string why;
    EXPECT_TRUE(load_snapshot(p, "ab12", week, 1'000'000 + 60, s, why)) << why;
    EXPECT_EQ(s.endpoints.size(), 2u);
    EXPECT_FALSE(load_snapshot(p, "cd34", week, 1'000'060, s, why));
    EXPECT_NE(why.find("another CA"), std::string::npos) << why;
    EXPECT_FALSE(load_snapshot(p, "", week, 1'000'060, s, why)) << "no CA hash: cannot tell, so foreign";
    EXPECT_FALSE(load_snapshot(p, "ab12", week, 1'000'000 + week + 1, s, why));
    EXPECT_NE(why.find("too old"), std::string::npos) << why;
    EXPECT_FALSE(load_snapshot(p, "ab12", week, 1'000'000 - kSnapshotFutureSkewS - 1, s, why));
    EXPECT_NE(why.find("in the future"), std::string::npos) << why;
    EXPECT_TRUE(load_snapshot(p, "ab12", week, 1'000'000 - kSnapshotFutureSkewS + 1, s, why)) << "small skew is fine";
    EXPECT_FALSE(load_snapshot(d.file("absent.json"), "ab12", week, 1'000'060, s, why));
    EXPECT_NE(why.find("cannot read"), std::string::npos) << why;
    put(p, std::string(kMaxSnapshotBytes + 10, 'x'));
    EXPECT_FALSE(load_snapshot(p, "ab12", week, 1'000'060, s, why));
    EXPECT_NE(why.find("larger than"), std::string::npos) << why;
    EXPECT_FALSE(load_snapshot(d.path, "ab12", week, 1'000'060, s, why)) << "a directory";
}

TEST(DiscoverySnapshot, AtomicWriteReplacesAndLeavesNoTemporary) {
    TempDir d;
    const std::string p = d.file("discovery.json");
    std::string err;
    ASSERT_TRUE(write_file_atomic(p, "one\n", err)) << err;
    ASSERT_TRUE(write_file_atomic(p, "two\n", err)) << err;
    std::stringstream got;
    got << std::ifstream(p).rdbuf();
    EXPECT_EQ(got.str(), "two\n");
    EXPECT_NE(access((p + ".tmp").c_str(), F_OK), 0) << "the temporary file was renamed";
    EXPECT_FALSE(write_file_atomic(d.file("missing/dir/x.json"), "x", err));
    EXPECT_NE(err.find("cannot create"), std::string::npos) << err;
    chmod(d.path.c_str(), 0500);
    if (geteuid() != 0) {  // root writes anyway
        EXPECT_FALSE(write_file_atomic(p, "three\n", err));
    }
    chmod(d.path.c_str(), 0700);
}

TEST(DiscoverySnapshot, FileHash) {
    TempDir d;
    put(d.file("ca.crt"), "abc");
    EXPECT_EQ(file_sha256_hex(d.file("ca.crt")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(file_sha256_hex(d.file("none")), "");
}
