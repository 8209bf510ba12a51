// SIGHUP reload of the real binary: under load nothing is dropped or corrupted, endpoints and
// listeners follow the file, and a bad configuration leaves the running one in force.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "harness/harness.h"

using namespace it;

namespace {

struct ConfigFile {
    ConfigFile() {
        char tmpl[] = "/tmp/kprism-reload-XXXXXX";
        int fd = mkstemp(tmpl);
        ::close(fd);
        path = tmpl;
    }
    ~ConfigFile() { unlink(path.c_str()); }
    void write(const std::string& text) {
        std::ofstream(path + ".tmp") << text;
        std::rename((path + ".tmp").c_str(), path.c_str());
    }
    std::string path;
};

std::string endpoints_toml(const std::vector<std::string>& eps, const std::string& extra = "") {
    std::string list;
    for (auto& e : eps) list += (list.empty() ? "\"" : ", \"") + e + "\"";
    return "endpoints = [" + list + "]\n" + extra;
}

// Sends SIGHUP and waits for its outcome line; returns true if the reload was applied.
bool reload(Kprism& k) {
    size_t ok = k.count_output("msg=\"configuration reloaded\""), bad = k.count_output("msg=\"reload failed");
    k.signal(SIGHUP);
    bool done = eventually([&] {
        return k.count_output("msg=\"configuration reloaded\"") > ok || k.count_output("msg=\"reload failed") > bad;
    });
    EXPECT_TRUE(done) << "no outcome logged for SIGHUP";
    return k.count_output("msg=\"configuration reloaded\"") > ok;
}


}  // namespace

// Live connections carry checked data while SIGHUP arrives again and again, with good and bad
// configurations: none is dropped, no byte is corrupted, new connections keep working.
TEST(Reload, UnderLoadDropsNothing) {
    TcpServer a(TcpServer::echo), b(TcpServer::echo);
    ConfigFile cf;
    cf.write(endpoints_toml({a.endpoint()}));
    Kprism k({}, {"--config", cf.path});
    std::atomic<bool> stop{false};
    std::atomic<int> broken{0}, corrupted{0};
    std::atomic<uint64_t> bytes{0};
    std::vector<std::thread> streams;
    for (int t = 0; t < 24; ++t) {
        streams.emplace_back([&, t] {
            int fd = connect_to(k.port);
            if (fd < 0) {
                ++broken;
                return;
            }
            std::vector<unsigned char> out(8192), in(8192);
            uint64_t off = 0;
            while (!stop) {
                fill_pattern(1000 + t, off, out.data(), out.size());
                if (!send_all(fd, out.data(), out.size()) || recv_exact(fd, in.data(), in.size(), 5000ms) != in.size()) {
                    ++broken;
                    break;
                }
                if (in != out) ++corrupted;
                off += out.size();
                bytes += out.size();
            }
            ::close(fd);
        });
    }
    std::atomic<int> new_failed{0}, new_ok{0};
    std::thread fresh([&] {
        while (!stop) {
            if (echo_ok(k.port)) ++new_ok;
            else ++new_failed;
        }
    });
    int applied = 0, rejected = 0;
    for (int i = 0; i < 20; ++i) {
        switch (i % 4) {
        case 0: cf.write(endpoints_toml({a.endpoint(), b.endpoint()}, "policy = \"least-connections\"\n")); break;
        case 1: cf.write(endpoints_toml({a.endpoint()}, "[tcp]\nkeepalive = \"20s\"\n")); break;
        case 2: cf.write("endpoints = [\"" + a.endpoint() + "\"\n"); break;  // invalid TOML
        case 3: cf.write(endpoints_toml({a.endpoint()}, "[health]\ntimeout = \"9s\"\n")); break;  // >= interval
        }
        if (reload(k)) ++applied;
        else ++rejected;
    }
    std::this_thread::sleep_for(200ms);  // let the streams run on the final configuration too
    stop = true;
    for (auto& t : streams) t.join();
    fresh.join();
    EXPECT_EQ(applied, 10);
    EXPECT_EQ(rejected, 10);
    EXPECT_EQ(broken, 0);
    EXPECT_EQ(corrupted, 0);
    EXPECT_EQ(new_failed, 0);
    EXPECT_GT(new_ok, 0);
    EXPECT_GT(bytes.load(), 0u);
    EXPECT_EQ(k.stat("client_failures"), 0);
    RecordProperty("bytes_checked", std::to_string(bytes.load()));
    RecordProperty("new_connections", std::to_string(new_ok.load()));
    printf("reload under load: 20 SIGHUPs (10 applied, 10 rejected), 24 streams, %llu bytes checked, %d new "
           "connections, 0 dropped\n",
           static_cast<unsigned long long>(bytes.load()), new_ok.load());
}

TEST(Reload, RemovedEndpointDrainsAndAddedOneServes) {
    TcpServer a(TcpServer::echo), b(TcpServer::echo);
    ConfigFile cf;
    cf.write(endpoints_toml({b.endpoint()}, "drain_timeout = \"400ms\"\n"));
    Kprism k({}, {"--config", cf.path});
    int on_b = connect_to(k.port);
    ASSERT_TRUE(send_all(on_b, "x", 1));
    char c;
    ASSERT_EQ(recv_exact(on_b, &c, 1), 1u);
    cf.write(endpoints_toml({a.endpoint()}, "drain_timeout = \"400ms\"\n"));
    ASSERT_TRUE(reload(k));
    EXPECT_TRUE(k.wait_output("msg=\"endpoint removed; its connections drain\" upstream=" + b.endpoint()));
    EXPECT_TRUE(k.wait_output("msg=\"endpoint added\" upstream=" + a.endpoint()));
    int before = a.accepted();
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(echo_ok(k.port));
    EXPECT_EQ(a.accepted() - before, 5) << "new connections go to the added endpoint only";
    // The connection on the removed endpoint still works until the drain timeout closes it.
    int err = -1;
    recv_until_eof(on_b, &err, 5000ms);
    EXPECT_NE(err, ETIMEDOUT);
    ::close(on_b);
}

TEST(Reload, BadConfigurationKeepsTheOldOne) {
    TcpServer a(TcpServer::echo);
    ConfigFile cf;
    cf.write(endpoints_toml({a.endpoint()}));
    Kprism k({}, {"--config", cf.path});
    cf.write("endpoints = []\n");
    EXPECT_FALSE(reload(k));
    EXPECT_TRUE(k.wait_output("reload failed; keeping the old configuration"));
    EXPECT_TRUE(echo_ok(k.port));
    // A listener that cannot be bound is also a failed reload, with nothing half-applied: the
    // new port is taken, so the old listener, endpoints and policy stay.
    int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2, on kprism's port
    sa.sin_port = htons(static_cast<uint16_t>(k.port));
    ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ASSERT_EQ(::listen(taken, 1), 0);
    cf.write(endpoints_toml({a.endpoint()}, "bind_address = [\"127.0.0.1\", \"127.0.0.2\"]\npolicy = \"latency\"\n"));
    EXPECT_FALSE(reload(k));
    EXPECT_TRUE(k.wait_output("cannot listen on 127.0.0.2:" + std::to_string(k.port)));
    ::close(taken);
    EXPECT_TRUE(k.running());
    EXPECT_TRUE(echo_ok(k.port));
    EXPECT_EQ(k.count_output("configuration reloaded"), 0u);
    std::string metrics = http_get(k.admin_port, "/metrics");
    EXPECT_NE(metrics.find("kprism_config_reloads_total{result=\"failure\"} 2"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("kprism_config_reloads_total{result=\"success\"} 0"), std::string::npos) << metrics;
}

TEST(Reload, ListenersFollowTheFile) {
    TcpServer a(TcpServer::echo, /*ipv6=*/true);
    ConfigFile cf;
    cf.write(endpoints_toml({a.endpoint()}));
    Kprism k({}, {"--config", cf.path});
    EXPECT_LT(connect_to(k.port, /*ipv6=*/true), 0);
    cf.write(endpoints_toml({a.endpoint()}, "bind_address = [\"127.0.0.1\", \"::1\"]\n"));
    ASSERT_TRUE(reload(k));
    int fd6 = connect_to(k.port, true);
    ASSERT_GE(fd6, 0);
    ASSERT_TRUE(send_all(fd6, "v6", 2));
    char buf[2];
    ASSERT_EQ(recv_exact(fd6, buf, 2), 2u);
    cf.write(endpoints_toml({a.endpoint()}, "bind_address = [\"::1\"]\n"));
    ASSERT_TRUE(reload(k));
    EXPECT_TRUE(eventually([&] {
        int fd = connect_to(k.port);
        if (fd >= 0) ::close(fd);
        return fd < 0;
    }));
    // The connection accepted on ::1 before is untouched.
    ASSERT_TRUE(send_all(fd6, "ok", 2));
    EXPECT_EQ(recv_exact(fd6, buf, 2), 2u);
    ::close(fd6);
}
