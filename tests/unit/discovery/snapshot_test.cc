// SPDX-License-Identifier: Apache-2.0
// The discovery snapshot: its format, every reason to ignore one, the atomic write.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
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
    s.zones = {{"10.0.0.1:6443", "zone-a"}};  // [fd00::2]:443 has none
    return s;
}

}  // namespace

TEST(DiscoverySnapshot, RoundTrip) {
    std::string text = render_snapshot(sample());
    EXPECT_EQ(text, R"({"kind":"kprism-discovery-snapshot","version":3,"written_unix":1000000,"ca_sha256":"ab12",)"
                    R"("endpoints":[{"address":"10.0.0.1:6443","zone":"zone-a"},{"address":"[fd00::2]:443"}]})"
                    "\n");
    DiscoverySnapshot back;
    std::string err;
    ASSERT_TRUE(parse_snapshot(text, back, err)) << err;
    EXPECT_EQ(back.written_unix, 1'000'000);
    EXPECT_EQ(back.ca_sha256, "ab12");
    ASSERT_EQ(back.endpoints.size(), 2u);
    EXPECT_EQ(back.endpoints[0].str(), "10.0.0.1:6443");
    EXPECT_EQ(back.endpoints[1].str(), "[fd00::2]:443");
    EXPECT_EQ(back.zones, (std::map<std::string, std::string>{{"10.0.0.1:6443", "zone-a"}}));
    EXPECT_TRUE(back.checked);
    EXPECT_EQ(render_snapshot(back), text);
}

// Version 2 (the layout before zones: "ip:port" strings, every one checked) is still read: the
// same endpoints, checked, with no zone.
TEST(DiscoverySnapshot, VersionTwoIsReadWithoutZones) {
    DiscoverySnapshot back;
    std::string err;
    ASSERT_TRUE(parse_snapshot(R"({"kind":"kprism-discovery-snapshot","version":2,"written_unix":1000000,)"
                               R"("ca_sha256":"ab12","endpoints":["10.0.0.1:6443","[fd00::2]:443"]})"
                               "\n",
                               back, err))
        << err;
    EXPECT_TRUE(back.checked);
    ASSERT_EQ(back.endpoints.size(), 2u);
    EXPECT_EQ(back.endpoints[1].str(), "[fd00::2]:443");
    EXPECT_TRUE(back.zones.empty());
    // Objects are version 3's form, not version 2's.
    EXPECT_FALSE(parse_snapshot(R"({"kind":"kprism-discovery-snapshot","version":2,"written_unix":1,"ca_sha256":"",)"
                                R"("endpoints":[{"address":"10.0.0.1:6443"}]})",
                                back, err));
    EXPECT_NE(err.find("not an IP address with a port"), std::string::npos) << err;
}

// A snapshot from a newer kprism (or any version this one does not know) is refused with a reason
// that says so; kprism then starts as with no snapshot (membership.cc: "discovery snapshot ignored").
TEST(DiscoverySnapshot, UnknownVersionsAreRefused) {
    struct Case {
        std::string version, reason;
    } cases[] = {
        {"4", "version 4 is newer than this kprism reads (1 to 3): written by a newer kprism"},
        {"9223372036854775807", "is newer than this kprism reads"},
        {"0", "version 0 is unknown (this kprism reads 1 to 3)"},
        {"-1", "version -1 is unknown"},
        {"\"3\"", "version missing or not an integer"},
        {"3.5", "version missing or not an integer"},
        {"null", "version missing or not an integer"},
    };
    for (const auto& c : cases) {
        DiscoverySnapshot s;
        std::string err;
        EXPECT_FALSE(parse_snapshot(R"({"kind":"kprism-discovery-snapshot","version":)" + c.version +
                                        R"(,"written_unix":1,"ca_sha256":"","endpoints":[{"address":"10.0.0.1:6443"}]})",
                                    s, err))
            << c.version;
        EXPECT_NE(err.find(c.reason), std::string::npos) << c.version << ": " << err;
    }
    TempDir d;
    const std::string p = d.file("discovery.json");
    put(p, R"({"kind":"kprism-discovery-snapshot","version":4,"written_unix":1000000,"ca_sha256":"ab12",)"
           R"("endpoints":[{"address":"10.0.0.1:6443","zone":"a","weight":2}]})");
    DiscoverySnapshot s;
    std::string why;
    EXPECT_FALSE(load_snapshot(p, "ab12", 86400, 1'000'060, s, why));
    EXPECT_NE(why.find("newer kprism"), std::string::npos) << why;
}

// Version 3's zones are checked as the slices' are: a file that breaks the rules is refused whole
// (kprism wrote it; anything else is tampering or damage).
TEST(DiscoverySnapshot, VersionThreeZonesAreChecked) {
    auto with = [](const std::string& ep) {
        return R"({"kind":"kprism-discovery-snapshot","version":3,"written_unix":1,"ca_sha256":"","endpoints":[)" + ep + "]}";
    };
    DiscoverySnapshot s;
    std::string err;
    ASSERT_TRUE(parse_snapshot(with(R"({"address":"10.0.0.1:6443","zone":""},{"address":"10.0.0.2:6443","zone":null},)"
                                    R"({"address":"10.0.0.3:6443","zone":"eu-west-1a","x":1})"),
                               s, err))
        << err;
    EXPECT_EQ(s.endpoints.size(), 3u);
    EXPECT_EQ(s.zones, (std::map<std::string, std::string>{{"10.0.0.3:6443", "eu-west-1a"}}));
    struct Case {
        std::string ep, reason;
    } cases[] = {
        {R"({"address":"10.0.0.1:6443","zone":"a b"})", "zone 'a b' is not a label value"},
        {R"({"address":"10.0.0.1:6443","zone":")" + std::string(64, 'z') + R"("})", "is 64 bytes, at most 63"},
        {R"({"address":"10.0.0.1:6443","zone":"-a"})", "must begin and end with a letter or digit"},
        {R"({"address":"10.0.0.1:6443","zone":7})", "zone not a string"},
        {R"({"address":"10.0.0.1:6443","zone":["a"]})", "zone not a string"},
        {R"({"zone":"a"})", "not an IP address with a port"},
        {R"({"address":7})", "not an IP address with a port"},
        {R"({"address":"api:6443"})", "not an IP address with a port"},
        {R"("10.0.0.1:6443")", "not an IP address with a port"},
    };
    for (const auto& c : cases) {
        EXPECT_FALSE(parse_snapshot(with(c.ep), s, err)) << c.ep;
        EXPECT_NE(err.find(c.reason), std::string::npos) << c.ep << ": " << err;
    }
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
        {R"({"kind":"kprism-discovery-snapshot","version":4,"written_unix":1,"ca_sha256":"","endpoints":[]})",
         "version 4 is newer"},
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

// A hostile written_unix: before the epoch (INT64_MIN, which made now - written overflow and
// pass the age check) is refused; so is a FIFO at the path, which a plain open() waits on forever.
TEST(DiscoverySnapshot, HostileTimesAndFilesAreRefused) {
    TempDir d;
    const std::string p = d.file("discovery.json");
    const int64_t week = 7 * 86400;
    DiscoverySnapshot s;
    std::string why;
    for (int64_t w : {std::numeric_limits<int64_t>::min(), int64_t{-1}, int64_t{-10'000'000'000'000'000}}) {
        DiscoverySnapshot snap = sample();
        snap.written_unix = w;
        put(p, render_snapshot(snap));
        EXPECT_FALSE(load_snapshot(p, "ab12", week, 1'000'060, s, why)) << w;
        EXPECT_NE(why.find("written_unix"), std::string::npos) << why;
    }
    const std::string fifo = d.file("fifo.json");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_FALSE(load_snapshot(fifo, "ab12", week, 1'000'060, s, why)) << "returns at once, no writer needed";
    EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
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
