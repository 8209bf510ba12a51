// SPDX-License-Identifier: Apache-2.0
// Restarts that keep connections: the real binary hands its sockets to a file descriptor store
// the test owns (systemd's FDSTORE=1 protocol on a NOTIFY_SOCKET), and a second kprism started
// with them (LISTEN_FDS/LISTEN_FDNAMES, as systemd passes them back) resumes splicing.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <openssl/ssl.h>

#include "harness/apiserver.h"
#include "harness/dns.h"
#include "harness/harness.h"
#include "harness/pki.h"
#include "kprism/base/json.h"
#include "kprism/handoff/record.h"

using namespace it;

namespace {

// systemd's side of the fd store: FDSTORE=1 keeps the passed descriptors under FDNAME,
// FDSTOREREMOVE=1 closes them, BARRIER=1 is answered by closing its descriptor; a stored
// descriptor that reports POLLHUP or POLLERR is dropped unless it came with FDPOLL=0, as systemd
// drops it. A thread reads the socket, as systemd does, so a kprism waiting on its barrier is answered.
class FdStore {
public:
    FdStore() {
        char tmpl[] = "/tmp/kprism-fdstore-XXXXXX";
        dir_ = mkdtemp(tmpl);
        path_ = dir_ + "/notify";
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, path_.data(), path_.size());
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) throw std::runtime_error("bind");
        thread_ = std::thread([this] { loop(); });
    }
    ~FdStore() {
        stop_ = true;
        thread_.join();
        ::close(fd_);
        for (auto& [name, fds] : store_)
            for (int f : fds) ::close(f);
        std::filesystem::remove_all(dir_);
    }
    std::string env() const { return "NOTIFY_SOCKET=" + path_; }

    size_t count(const std::string& name) {
        std::lock_guard g(mu_);
        auto it = store_.find(name);
        return it == store_.end() ? 0 : it->second.size();
    }
    size_t removes(const std::string& name) {
        std::lock_guard g(mu_);
        return removed_[name];
    }
    size_t barriers() const { return barriers_; }
    size_t dropped() const { return dropped_; }  // for POLLHUP/POLLERR

    // What systemd passes to the next process: the stored descriptors, and the environment.
    Spawn spawn_next(std::vector<std::string> env) {
        std::lock_guard g(mu_);
        for (auto& [name, fds] : store_)
            std::erase_if(fds, [this](int f) {
                pollfd p{f, 0, 0};
                if (unpolled_.count(f) || ::poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLERR))) return false;
                ::close(f);
                ++dropped_;
                return true;
            });
        Spawn s;
        std::string names;
        for (auto& [name, fds] : store_)
            for (int f : fds) {
                s.fds.push_back(f);
                names += (names.empty() ? "" : ":") + name;
            }
        env.push_back("LISTEN_FDS=" + std::to_string(s.fds.size()));
        env.push_back("LISTEN_PID={pid}");
        env.push_back("LISTEN_FDNAMES=" + names);
        s.env = std::move(env);
        return s;
    }
    // Replaces what is stored under `name` with a memfd holding `text`.
    void replace_record(const std::string& name, const std::string& text) {
        std::lock_guard g(mu_);
        for (int f : store_[name]) ::close(f);
        int m = memfd_create("test-record", MFD_CLOEXEC);
        if (::write(m, text.data(), text.size()) != static_cast<ssize_t>(text.size())) throw std::runtime_error("write");
        store_[name] = {m};
    }
    std::string record(const std::string& name) {
        std::lock_guard g(mu_);
        std::string out(1 << 20, '\0');
        auto& fds = store_[name];
        if (fds.empty()) return "";
        ssize_t n = ::pread(fds[0], out.data(), out.size(), 0);
        out.resize(n > 0 ? static_cast<size_t>(n) : 0);
        return out;
    }
    // Takes the connection sockets queued in the carrier stored under `name` (the test owns them
    // then): a copy of those sockets held elsewhere, which kprism's close alone cannot end.
    std::vector<int> take_queued(const std::string& name) {
        std::lock_guard g(mu_);
        bool truncated = false;
        auto& fds = store_[name];
        return fds.empty() ? std::vector<int>{} : kprism::handover::unpack_fds(fds[0], truncated);
    }
    // Drops what is stored under `name`.
    void drop(const std::string& name) {
        std::lock_guard g(mu_);
        for (int f : store_[name]) ::close(f);
        store_.erase(name);
    }
    // Drops everything (systemd after a stop with no job queued).
    void clear() {
        std::lock_guard g(mu_);
        for (auto& [name, fds] : store_)
            for (int f : fds) ::close(f);
        store_.clear();
    }

private:
    void loop() {
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 253)];
            iovec iov{buf, sizeof buf};
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            mh.msg_control = ctl;
            mh.msg_controllen = sizeof ctl;
            ssize_t n = ::recvmsg(fd_, &mh, MSG_CMSG_CLOEXEC);
            if (n < 0) continue;
            std::vector<int> fds;
            for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                    for (size_t i = 0; i < k; ++i) {
                        int f;
                        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
                        fds.push_back(f);
                    }
                }
            std::istringstream in(std::string(buf, static_cast<size_t>(n)));
            std::map<std::string, std::string> kv;
            for (std::string l; std::getline(in, l);)
                if (auto eq = l.find('='); eq != std::string::npos) kv[l.substr(0, eq)] = l.substr(eq + 1);
            std::lock_guard g(mu_);
            std::string name = kv.count("FDNAME") ? kv["FDNAME"] : "stored";
            if (kv["FDSTORE"] == "1") {
                for (int f : fds) {
                    store_[name].push_back(f);
                    if (kv["FDPOLL"] == "0") unpolled_.insert(f);
                }
                continue;
            }
            if (kv["FDSTOREREMOVE"] == "1") {
                for (int f : store_[name]) ::close(f);
                store_.erase(name);
                ++removed_[name];
            }
            if (kv["BARRIER"] == "1") ++barriers_;
            for (int f : fds) ::close(f);
        }
    }

    std::string dir_, path_;
    int fd_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<size_t> barriers_{0};
    std::mutex mu_;
    std::map<std::string, std::vector<int>> store_;
    std::map<std::string, size_t> removed_;
    std::set<int> unpolled_;
    std::atomic<size_t> dropped_{0};
    std::thread thread_;
};

// One client connection through kprism, echoed by the upstream.
struct Client {
    int fd = -1;
    explicit Client(int port) : fd(connect_to(port)) {}
    ~Client() {
        if (fd >= 0) ::close(fd);
    }
    bool echo(const std::string& s) {
        if (!send_all(fd, s.data(), s.size())) return false;
        std::string back(s.size(), '\0');
        return recv_exact(fd, back.data(), back.size(), 5000ms) == s.size() && back == s;
    }
};

std::string pattern(size_t n, size_t seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
    return s;
}

// n clients through kprism on `port`, each echoed once; fewer if one was not.
std::vector<std::unique_ptr<Client>> clients(int port, size_t n) {
    std::vector<std::unique_ptr<Client>> cs;
    for (size_t i = 0; i < n; ++i) {
        cs.push_back(std::make_unique<Client>(port));
        if (!cs.back()->echo("hello " + std::to_string(i))) {
            cs.pop_back();
            break;
        }
    }
    return cs;
}

// Each client streams `bytes` in 4 KiB pieces (about 0.3 s for 256 KiB) and reads its echo, each
// in its own threads; join_and_check() compares every byte.
class Streams {
public:
    Streams(std::vector<std::unique_ptr<Client>>& cs, size_t bytes) : got_(cs.size()) {
        for (size_t i = 0; i < cs.size(); ++i) {
            ts_.emplace_back([this, fd = cs[i]->fd, i, bytes] {
                std::thread reader([this, fd, i, bytes] {
                    std::string buf(bytes, '\0');
                    buf.resize(recv_exact(fd, buf.data(), bytes, 20000ms));
                    got_[i] = std::move(buf);
                });
                std::string data = pattern(bytes, i);
                for (size_t off = 0; off < bytes; off += 4096) {
                    send_all(fd, data.data() + off, std::min<size_t>(4096, bytes - off));
                    started_ = true;
                    std::this_thread::sleep_for(5ms);  // the stream spans the restart
                }
                reader.join();
            });
        }
        bytes_ = bytes;
    }
    ~Streams() {
        for (auto& t : ts_)
            if (t.joinable()) t.join();
    }
    bool wait_started() { return eventually([&] { return started_.load(); }); }
    void join_and_check() {
        for (auto& t : ts_) t.join();
        for (size_t i = 0; i < got_.size(); ++i) {
            EXPECT_EQ(got_[i].size(), bytes_) << "connection " << i;
            EXPECT_TRUE(got_[i] == pattern(bytes_, i)) << "connection " << i << " corrupted";
        }
    }

private:
    std::vector<std::string> got_;
    std::vector<std::thread> ts_;
    std::atomic<bool> started_{false};
    size_t bytes_ = 0;
};

// The first kprism: its data port fixed so the second one is configured the same.
std::unique_ptr<Kprism> first(const TcpServer& up, FdStore& store, int port, std::vector<std::string> extra = {}) {
    return std::make_unique<Kprism>(std::vector<std::string>{up.endpoint()}, std::move(extra),
                                    Spawn{{store.env(), "FDSTORE=64"}, {}}, port, free_port());
}

std::unique_ptr<Kprism> next(const std::vector<std::string>& endpoints, FdStore& store, int port) {
    return std::make_unique<Kprism>(endpoints, std::vector<std::string>{}, store.spawn_next({store.env(), "FDSTORE=64"}),
                                    port, free_port());
}

}  // namespace

// Connections carrying bytes both ways the whole time: not one byte lost or reordered, the
// listener kept (a client that connects between the two processes waits and is served), and the
// second process takes the descriptors out of the store.
TEST(Handover, ConnectionsSurviveARestartWithEveryByte) {
    TcpServer up(TcpServer::echo);
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port);
    ASSERT_TRUE(k1->wait_output("msg=started"));
    constexpr size_t kConns = 8;
    constexpr size_t kBytes = 256 * 1024;
    std::vector<std::unique_ptr<Client>> cs = clients(port, kConns);
    ASSERT_EQ(cs.size(), kConns);
    Streams streams(cs, kBytes);
    ASSERT_TRUE(streams.wait_started());
    k1->signal(SIGTERM);
    EXPECT_EQ(k1->wait(10000ms), 0);
    std::string out1 = k1->output();
    EXPECT_NE(out1.find("handing connections over to the next process"), std::string::npos) << out1;
    EXPECT_NE(out1.find("msg=\"handed over to the next process\" connections=8"), std::string::npos) << out1;
    EXPECT_NE(out1.find("systemd_confirmed=true"), std::string::npos) << out1;
    EXPECT_EQ(store.count("handover-conn"), 1u) << "one socket carries them all";
    EXPECT_EQ(store.count("handover-data"), 1u);
    EXPECT_EQ(store.count("handover-state"), 1u);
    EXPECT_GE(store.barriers(), 1u);
    std::string rec = store.record("handover-state");
    EXPECT_EQ(rec.rfind("kprism-handover 1\n", 0), 0u) << rec;
    EXPECT_NE(rec.find("end 8\n"), std::string::npos) << rec;
    // Between the two processes the listener is still open: the kernel queues this client.
    int between = connect_to(port);
    ASSERT_GE(between, 0);
    auto k2 = next({up.endpoint()}, store, port);
    EXPECT_EQ(store.dropped(), 0u) << "systemd would have dropped a stored descriptor (POLLHUP)";
    ASSERT_TRUE(k2->wait_output("msg=\"resumed connections handed over by the previous process\"")) << k2->output();
    EXPECT_TRUE(k2->wait_output("resumed=8 closed_unmatched=0 closed_without_entry=0")) << k2->output();
    EXPECT_NE(k2->output().find("handed_over=true"), std::string::npos) << k2->output();
    EXPECT_TRUE(eventually([&] { return store.count("handover-conn") == 0 && store.count("handover-data") == 0 &&
                                        store.count("handover-state") == 0; }))
        << "the second kprism did not remove its descriptors from the store";
    EXPECT_EQ(store.removes("handover-conn"), 1u);
    streams.join_and_check();
    Client waited{-1};
    waited.fd = between;
    EXPECT_TRUE(waited.echo("queued between the processes"));
    Client fresh(port);
    EXPECT_TRUE(fresh.echo("new"));
    EXPECT_EQ(k2->stat("connections_active"), static_cast<long>(kConns) + 2);
    EXPECT_EQ(k2->stat("connections_resumed"), static_cast<long>(kConns));
    EXPECT_EQ(k2->stat("connections_total"), 2);  // accepted: the queued one and the new one
    // Closing a resumed connection ends it upstream too (kprism owns the only copies now).
    int before = static_cast<int>(k2->stat("connections_active"));
    ::shutdown(cs[0]->fd, SHUT_WR);
    int err = -1;
    recv_until_eof(cs[0]->fd, &err, 5000ms);
    EXPECT_EQ(err, 0);
    EXPECT_TRUE(eventually([&] { return k2->stat("connections_active") == before - 1; }));
}

// The connections to an address of a hostname endpoint ("NAME@ADDRESS:PORT" in the record) are
// resumed although the new process has not resolved the name yet: the address is added from the
// record, and stays once the name resolves to it.
TEST(Handover, ConnectionsToAHostnamesAddressSurvive) {
    TcpServer up(TcpServer::echo);
    DnsServer dns;
    dns.set_zone(R"({"api.kprism.test": {"A": ["127.0.0.1"]}})");
    FdStore store;
    const int port = free_port();
    const std::string endpoint = "api.kprism.test:" + std::to_string(up.port());
    const std::string label = "api.kprism.test@127.0.0.1:" + std::to_string(up.port());
    auto k1 = std::make_unique<Kprism>(std::vector<std::string>{endpoint}, std::vector<std::string>{},
                                       Spawn{{store.env(), "FDSTORE=64", dns.dns_env()}, {}}, port, free_port());
    ASSERT_TRUE(k1->wait_output("msg=\"endpoint address added; checked before use\" upstream=" + label)) << k1->output();
    std::vector<std::unique_ptr<Client>> cs = clients(port, 4);
    ASSERT_EQ(cs.size(), 4u) << k1->output();
    k1->signal(SIGTERM);
    EXPECT_EQ(k1->wait(10000ms), 0);
    std::string rec = store.record("handover-state");
    EXPECT_NE(rec.find(" " + label + " "), std::string::npos) << rec;
    auto k2 = std::make_unique<Kprism>(std::vector<std::string>{endpoint}, std::vector<std::string>{},
                                       store.spawn_next({store.env(), "FDSTORE=64", dns.dns_env()}), port, free_port());
    ASSERT_TRUE(k2->wait_output("resumed=4 closed_unmatched=0 closed_without_entry=0")) << k2->output();
    EXPECT_NE(k2->output().find("msg=\"endpoint address added from the handover; checked, and kept while the name "
                                "resolves to it\" upstream=" + label),
              std::string::npos)
        << k2->output();
    EXPECT_TRUE(k2->wait_output("msg=\"endpoint resolved\" upstream=" + endpoint)) << k2->output();
    for (auto& c : cs) EXPECT_TRUE(c->echo("after the restart")) << k2->output();
    EXPECT_EQ(k2->output().find("no longer resolved"), std::string::npos) << k2->output();
    EXPECT_EQ(k2->count_output("endpoint address added"), 1u) << "added once, from the record" << k2->output();
}

// A half-closed connection (the client sent FIN, the upstream still sends) is handed over as such.
TEST(Handover, HalfClosedConnectionKeepsItsState) {
    // The upstream answers each connection's bytes only after the client's FIN, then closes.
    TcpServer up([](int fd) {
        std::string all = recv_until_eof(fd, nullptr, 20000ms);
        std::this_thread::sleep_for(1500ms);  // answers after the restart
        send_all(fd, all.data(), all.size());
    });
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port);
    ASSERT_TRUE(k1->wait_output("msg=started"));
    Client c(port);
    ASSERT_TRUE(send_all(c.fd, "question", 8));
    ::shutdown(c.fd, SHUT_WR);
    ASSERT_TRUE(eventually([&] { return up.accepted() == 1; }));
    std::this_thread::sleep_for(100ms);  // the FIN has been passed on (nothing to poll on here)
    k1->signal(SIGTERM);
    EXPECT_EQ(k1->wait(10000ms), 0);
    std::string rec = store.record("handover-state");
    EXPECT_NE(rec.find(" 9 "), std::string::npos) << "flags client_eof|upstream_shut expected: " << rec;
    auto k2 = next({up.endpoint()}, store, port);
    ASSERT_TRUE(k2->wait_output("resumed=1 ")) << k2->output();
    int err = -1;
    EXPECT_EQ(recv_until_eof(c.fd, &err, 10000ms), "question");
    EXPECT_EQ(err, 0);
    EXPECT_TRUE(eventually([&] { return k2->stat("connections_active") == 0; }));
}

// Bad state: another version, garbage, a truncated record, a socket the record does not name, an
// upstream no longer configured: those sockets are closed (their clients see the end and
// reconnect), one line says why, and the new process serves.
TEST(Handover, BadRecordsCloseTheirConnectionsAndNothingElse) {
    struct Case {
        const char* name;
        std::string record;  // empty: keep kprism's own
        bool other_upstream;
        const char* log;
    };
    const Case cases[] = {
        {"another version", "kprism-handover 2\nend 0\n", false, "not a version 1 record"},
        {"garbage", std::string("\x7f\x45\x4c\x46\x02\x01\x01\x00", 8) + std::string(4096, '\xff'), false,
         "not a version 1 record"},
        {"truncated", "kprism-handover 1\nconn 127.0.0.1:1 127", false, "truncated"},
        {"names other sockets", "kprism-handover 1\nconn 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3 127.0.0.1:4 x:1 0 0\nend 1\n",
         false, "closed_unmatched=1 closed_without_entry=2"},
        {"upstream not configured", "", true, "closed_unmatched=1 closed_without_entry=0"},
    };
    for (const Case& tc : cases) {
        SCOPED_TRACE(tc.name);
        TcpServer up(TcpServer::echo), other(TcpServer::echo);
        FdStore store;
        const int port = free_port();
        auto k1 = first(up, store, port);
        ASSERT_TRUE(k1->wait_output("msg=started"));
        Client c(port);
        ASSERT_TRUE(c.echo("x"));
        k1->signal(SIGTERM);
        ASSERT_EQ(k1->wait(10000ms), 0);
        ASSERT_EQ(store.count("handover-conn"), 1u);
        if (!tc.record.empty()) store.replace_record("handover-state", tc.record);
        auto k2 = next({tc.other_upstream ? other.endpoint() : up.endpoint()}, store, port);
        ASSERT_TRUE(k2->wait_output("msg=\"resumed connections handed over by the previous process\"")) << k2->output();
        EXPECT_NE(k2->output().find(tc.log), std::string::npos) << k2->output();
        EXPECT_TRUE(eventually([&] { return store.count("handover-conn") == 0; }));
        int err = -1;
        recv_until_eof(c.fd, &err, 5000ms);  // closed: EOF or a reset, not a hang
        EXPECT_NE(err, ETIMEDOUT);
        EXPECT_TRUE(k2->running());
        Client fresh(port);
        EXPECT_TRUE(fresh.echo("served"));
        EXPECT_EQ(k2->stat("connections_active"), 1);
    }
}

// Without $FDSTORE (or without a notify socket) SIGTERM drains as before.
TEST(Handover, WithoutAStoreSigtermDrains) {
    TcpServer up(TcpServer::echo);
    FdStore store;
    Kprism k({up.endpoint()}, {}, Spawn{{store.env()}, {}});
    ASSERT_TRUE(k.wait_output("msg=started"));
    Client c(k.port);
    ASSERT_TRUE(c.echo("a"));
    k.signal(SIGTERM);
    ASSERT_TRUE(k.wait_output("msg=\"shutting down\""));
    EXPECT_TRUE(c.echo("still draining"));
    ::close(c.fd);
    c.fd = -1;
    EXPECT_EQ(k.wait(5000ms), 0);
    EXPECT_EQ(k.output().find("handing"), std::string::npos);
    EXPECT_EQ(store.count("handover-conn"), 0u);
}

namespace {

// kprism run from a copy of the binary in a directory of the test's, so that the test can replace
// the executable the way a package upgrade does (a new file renamed over the path).
struct OwnBinary {
    std::filesystem::path dir, exe;
    OwnBinary() {
        char tmpl[] = "/tmp/kprism-inplace-XXXXXX";
        dir = mkdtemp(tmpl);
        exe = dir / "kprism";
        std::filesystem::copy_file(kprism_bin(), exe);
        std::filesystem::permissions(exe, std::filesystem::perms::owner_all);
    }
    ~OwnBinary() { std::filesystem::remove_all(dir); }
    void replace_with_script(const std::string& body) const {
        auto tmp = dir / "kprism.new";
        {
            std::ofstream f(tmp);
            f << "#!/bin/sh\n" << body << "\n";
        }
        std::filesystem::permissions(tmp, std::filesystem::perms::owner_all);
        std::filesystem::rename(tmp, exe);
    }
};

std::unique_ptr<Process> start_own(const OwnBinary& bin, const TcpServer& up, int port) {
    auto p = std::make_unique<Process>(std::vector<std::string>{
        bin.exe.string(), "--endpoints", up.endpoint(), "--bind-port", std::to_string(port), "--health-port",
        std::to_string(free_port())});
    if (!p->wait_output("msg=started")) throw std::runtime_error("kprism did not start: " + p->output());
    return p;
}

}  // namespace

// SIGUSR2 without a store: the executable on disk checks the configuration, then takes every
// connection over by exec, keeping the PID; not a byte lost, the listener never closed.
TEST(RestartInPlace, ConnectionsSurviveWithEveryByte) {
    TcpServer up(TcpServer::echo);
    OwnBinary bin;
    const int port = free_port();
    auto k = start_own(bin, up, port);
    constexpr size_t kConns = 8;
    constexpr size_t kBytes = 256 * 1024;
    std::vector<std::unique_ptr<Client>> cs = clients(port, kConns);
    ASSERT_EQ(cs.size(), kConns);
    Streams streams(cs, kBytes);
    ASSERT_TRUE(streams.wait_started());
    k->signal(SIGUSR2);
    ASSERT_TRUE(k->wait_output("msg=\"resumed connections handed over by the previous process\" resumed=8 "
                               "closed_unmatched=0",
                               10000ms))
        << k->output();
    streams.join_and_check();
    std::string out = k->output();
    EXPECT_NE(out.find("msg=\"restart in place: checking the configuration with the executable\""), std::string::npos);
    EXPECT_NE(out.find("msg=\"restarting in place: executing the new kprism\" executable=" + bin.exe.string() +
                       " connections=8 descriptors=4"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("handed_over=true"), std::string::npos) << out;
    EXPECT_TRUE(k->running()) << "the same process (PID) goes on";
    size_t starts = 0;
    for (size_t at = out.find("msg=\"kprism starting\""); at != std::string::npos; at = out.find("msg=\"kprism starting\"", at + 1))
        ++starts;
    EXPECT_EQ(starts, 2u);
    EXPECT_NE(out.find("pid=" + std::to_string(k->pid())), std::string::npos);
    Client fresh(port);
    EXPECT_TRUE(fresh.echo("new after the restart"));
    // A second restart in place from the restarted process, then a normal drain.
    k->signal(SIGUSR2);
    ASSERT_TRUE(k->wait_output("resumed=9 closed_unmatched=0", 10000ms)) << k->output();
    EXPECT_TRUE(fresh.echo("still the same socket"));
    EXPECT_TRUE(cs[3]->echo("and an old one"));
    k->signal(SIGTERM);
    for (auto& c : cs) {
        ::close(c->fd);
        c->fd = -1;
    }
    ::close(fresh.fd);
    fresh.fd = -1;
    EXPECT_EQ(k->wait(10000ms), 0) << k->output();
}

// A reload (SIGHUP) sent while a restart in place executes the new kprism waits for the new image
// instead of killing it before it has its handlers: SIGHUP every 2 ms from the SIGUSR2 until the
// connection is resumed, and kprism goes on, serves, and reloads.
TEST(RestartInPlace, SignalsDuringTheExecWaitForTheNewImage) {
    TcpServer up(TcpServer::echo);
    OwnBinary bin;
    const int port = free_port();
    auto k = start_own(bin, up, port);
    Client c(port);
    ASSERT_TRUE(c.echo("before"));
    std::atomic<bool> stop{false};
    std::thread hup([&] {
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (!stop && std::chrono::steady_clock::now() < until && k->running()) {
            ::kill(k->pid(), SIGHUP);
            std::this_thread::sleep_for(2ms);
        }
    });
    k->signal(SIGUSR2);
    const bool resumed = k->wait_output("resumed=1 closed_unmatched=0", 10000ms);
    stop = true;
    hup.join();
    ASSERT_TRUE(resumed) << k->output();
    EXPECT_TRUE(k->running()) << k->output();
    EXPECT_TRUE(c.echo("after the restart, with reloads all along")) << k->output();
    const std::string out = k->output();
    const size_t exec_at = out.find("msg=\"restarting in place: executing the new kprism\"");
    ASSERT_NE(exec_at, std::string::npos) << out;
    EXPECT_NE(out.find("msg=\"reloading configuration\"", exec_at), std::string::npos)
        << "the new image handles the reloads sent to it: " << out;
    k->signal(SIGTERM);
    ::close(c.fd);
    c.fd = -1;
    EXPECT_EQ(k->wait(10000ms), 0) << k->output();
}

// The executable on disk is checked first: one that rejects the configuration (here a broken
// "upgrade") leaves kprism running untouched; a good one is used, as a package upgrade's would be.
TEST(RestartInPlace, TheNewExecutableIsCheckedFirst) {
    TcpServer up(TcpServer::echo);
    OwnBinary bin;
    const int port = free_port();
    auto k = start_own(bin, up, port);
    Client c(port);
    ASSERT_TRUE(c.echo("before"));
    bin.replace_with_script("echo 'kprism: a broken build' >&2; exit 1");
    k->signal(SIGUSR2);
    ASSERT_TRUE(k->wait_output("msg=\"restart in place refused: kprism keeps running\" reason=\"the executable "
                               "rejects the configuration"))
        << k->output();
    EXPECT_NE(k->output().find("kprism: a broken build"), std::string::npos) << "its errors are in the log";
    EXPECT_EQ(k->output().find("executing the new kprism"), std::string::npos);
    EXPECT_TRUE(c.echo("still served by the same process"));
    EXPECT_TRUE(k->running());
    // An executable that is gone: refused at once.
    std::filesystem::remove(bin.exe);
    k->signal(SIGUSR2);
    ASSERT_TRUE(k->wait_output("reason=\"cannot execute the executable\"")) << k->output();
    EXPECT_TRUE(c.echo("and again"));
    // The upgrade that works: the new executable (here a wrapper around the real one) takes over.
    bin.replace_with_script("echo upgraded-binary-ran >&2; exec " + std::filesystem::absolute(kprism_bin()).string() +
                            " \"$@\"");
    k->signal(SIGUSR2);
    ASSERT_TRUE(k->wait_output("resumed=1 closed_unmatched=0", 10000ms)) << k->output();
    EXPECT_NE(k->output().find("upgraded-binary-ran"), std::string::npos);
    EXPECT_TRUE(c.echo("after the upgrade, same socket"));
    EXPECT_TRUE(k->running());
}

namespace {

// The crash copy's record (src/handoff/crash_copy.cc), whichever generation holds it; "" when none is stored.
std::string crash_record(FdStore& store) {
    for (const char* name : {"crash-state-0", "crash-state-1"})
        if (store.count(name)) return store.record(name);
    return "";
}

bool has_metric_line(const std::string& metrics, const std::string& line) {
    return ("\n" + metrics).find("\n" + line + "\n") != std::string::npos;
}

bool crash_copy_holds(FdStore& store, size_t conns) {
    return crash_record(store).find("\nend " + std::to_string(conns) + "\n") != std::string::npos;
}

}  // namespace

// keep_on_crash (on by default; here under a store): a SIGKILLed kprism leaves the copy of its
// connections and listener in the store, and the next process resumes them: every client carries
// bytes both ways afterwards, and one that connected meanwhile waited in the backlog.
TEST(CrashCopy, IdleConnectionsSurviveSigkill) {
    TcpServer up(TcpServer::echo);
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port);
    ASSERT_TRUE(k1->wait_output("keeping a copy of the connections")) << k1->output();
    constexpr size_t kConns = 8;
    std::vector<std::unique_ptr<Client>> cs = clients(port, kConns);
    ASSERT_EQ(cs.size(), kConns);
    ASSERT_TRUE(eventually([&] { return crash_copy_holds(store, kConns); })) << k1->output();
    EXPECT_EQ(store.count("crash-data"), 1u) << "the listener";
    EXPECT_EQ(store.count("crash-conn-0") + store.count("crash-conn-1"), 1u) << "one generation at a time";
    EXPECT_TRUE(has_metric_line(http_get(k1->admin_port, "/metrics"), "kprism_crash_copy_connections 8"));
    k1->signal(SIGKILL);
    k1->wait(5000ms);
    for (auto& c : cs) EXPECT_TRUE(still_open(c->fd));
    int between = connect_to(port);
    ASSERT_GE(between, 0);
    auto k2 = next({up.endpoint()}, store, port);
    EXPECT_EQ(store.dropped(), 0u);
    ASSERT_TRUE(k2->wait_output("msg=\"resumed connections kept from before a crash (keep_on_crash)\"")) << k2->output();
    EXPECT_TRUE(k2->wait_output("resumed=8 closed_unmatched=0 closed_without_entry=0")) << k2->output();
    EXPECT_NE(k2->output().find("handed_over=true"), std::string::npos) << "the listener " << k2->output();
    for (size_t i = 0; i < kConns; ++i) EXPECT_TRUE(cs[i]->echo("after the crash " + std::to_string(i))) << i;
    Client waited{-1};
    waited.fd = between;
    EXPECT_TRUE(waited.echo("queued during the crash"));
    EXPECT_EQ(k2->stat("connections_resumed"), static_cast<long>(kConns));
    // The new process keeps its own copy: the resumed connections and the queued one.
    EXPECT_TRUE(eventually([&] { return crash_copy_holds(store, kConns + 1); })) << crash_record(store);
    // And a crash of that one is survived the same way.
    k2->signal(SIGKILL);
    k2->wait(5000ms);
    auto k3 = next({up.endpoint()}, store, port);
    ASSERT_TRUE(k3->wait_output("resumed=9 closed_unmatched=0")) << k3->output();
    for (size_t i = 0; i < kConns; ++i) EXPECT_TRUE(cs[i]->echo("after the second crash")) << i;
    EXPECT_TRUE(waited.echo("and again"));
}

// While the store holds a copy of a connection's sockets, kprism's own close would not end it:
// kprism ends it itself, a reset as a reset (the upstream resets, the client sees ECONNRESET) and a
// close as a FIN (the drain timeout), although here the test holds the copied sockets forever.
TEST(CrashCopy, ClosingACopiedConnectionEndsIt) {
    // Echoes the first message, and resets the connection on the second (connect(AF_UNSPEC)).
    TcpServer up([](int fd) {
        char buf[64];
        for (int i = 0; i < 2; ++i) {
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return;
            if (i == 0) send_all(fd, buf, static_cast<size_t>(n));
        }
        sockaddr unspec{};
        unspec.sa_family = AF_UNSPEC;
        ::connect(fd, &unspec, sizeof unspec);
    });
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port, {"--drain-timeout", "1s"});
    Client reset_me(port), drain_me(port);
    ASSERT_TRUE(reset_me.echo("hello"));
    ASSERT_TRUE(drain_me.echo("hello"));
    ASSERT_TRUE(eventually([&] { return crash_copy_holds(store, 2); })) << k1->output();
    std::vector<int> held;
    for (const char* name : {"crash-conn-0", "crash-conn-1"})
        for (int fd : store.take_queued(name)) held.push_back(fd);
    EXPECT_EQ(held.size(), 4u) << "two sockets a connection";
    ASSERT_TRUE(send_all(reset_me.fd, "bye", 3));
    int err = 0;
    recv_until_eof(reset_me.fd, &err, 5000ms);
    EXPECT_EQ(err, ECONNRESET) << "the upstream's reset, passed on";
    k1->signal(SIGINT);  // drain: the rest is closed after 1 s
    err = -1;
    recv_until_eof(drain_me.fd, &err, 5000ms);
    EXPECT_EQ(err, 0) << "a FIN";
    EXPECT_EQ(k1->wait(5000ms), 0);
    for (int fd : held) ::close(fd);
}

// A connection whose upstream has not answered yet may still be replayed to another upstream, so
// it is left out of the copy; it goes in at the next tick once the upstream has answered.
TEST(CrashCopy, AConnectionGoesInOnceItsUpstreamAnswers) {
    TcpServer up(TcpServer::echo);
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port);
    Client silent(port), talking(port);
    ASSERT_TRUE(talking.echo("hello"));
    ASSERT_TRUE(eventually([&] { return crash_copy_holds(store, 1); })) << crash_record(store);
    ASSERT_TRUE(silent.echo("now"));
    EXPECT_TRUE(eventually([&] { return crash_copy_holds(store, 2); })) << crash_record(store);
}

// keep_on_crash = false, or no store: nothing is copied.
TEST(CrashCopy, OffStoresNothing) {
    TcpServer up(TcpServer::echo);
    FdStore store;
    const int port = free_port();
    auto k1 = first(up, store, port, {"--keep-on-crash=false"});
    ASSERT_TRUE(k1->wait_output("msg=started"));
    Client c(port);
    ASSERT_TRUE(c.echo("x"));
    // When on, the listener is copied before "started" is logged.
    EXPECT_EQ(k1->stat("connections_active"), 1);
    EXPECT_EQ(crash_record(store), "");
    EXPECT_EQ(store.count("crash-data"), 0u);
    EXPECT_EQ(k1->output().find("keep_on_crash"), std::string::npos) << k1->output();
    EXPECT_FALSE(has_metric_line(http_get(k1->admin_port, "/metrics"), "kprism_crash_copy_connections 0"));
    Kprism nostore({up.endpoint()}, {}, Spawn{{store.env()}, {}});
    ASSERT_TRUE(nostore.wait_output("keep_on_crash: off, no file descriptor store")) << nostore.output();
}

// What a restart carries: each upstream's state (verdict, reason, rise/fall, the credentials
// condition, the holds), so that a restart in place, a handover through the store and the crash
// copy change no routing decision. TLS stand-ins, clients arriving every few milliseconds through
// the restart, each one telling which stand-in served it.
namespace {

std::vector<std::string> checked(const Pki& pki, std::vector<std::string> more = {}) {
    // fall 5: a verdict carries while its last result is at most 5 s old (interval x fall), room
    // for a SIGKILL, a new process and its start on a loaded machine.
    std::vector<std::string> a = {"--client-cert",    pki.client_pem, "--client-key",           pki.client_pem,
                                  "--ca-file",        pki.ca_cert,    "--health-interval",      "1s",
                                  "--health-timeout", "500ms",        "--health-fast-interval", "200ms",
                                  "--health-fall",    "5"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

// Clients that keep arriving: each connects to kprism, does a TLS handshake with the kubelet's
// certificate and one GET, and notes the stand-in that served it ("" when it was refused or reset),
// on `threads` threads, one new client every `every` on each, until stop().
class Arrivals {
public:
    Arrivals(const Pki& pki, int port, int threads = 3, std::chrono::milliseconds every = 6ms) {
        ::signal(SIGPIPE, SIG_IGN);  // a client kprism resets is counted, not the end of the test binary
        ctx_ = SSL_CTX_new(TLS_client_method());
        SSL_CTX_use_certificate_chain_file(ctx_, pki.client_pem.c_str());
        SSL_CTX_use_PrivateKey_file(ctx_, pki.client_pem.c_str(), SSL_FILETYPE_PEM);
        SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);  // who answers is the question, not whether to trust it
        for (int i = 0; i < threads; ++i)
            ts_.emplace_back([this, port, every] {
                while (!stop_) {
                    const auto began = std::chrono::steady_clock::now();
                    std::string by = one(port);
                    {
                        std::lock_guard g(mu_);
                        ++served_[by];
                        if (by.empty()) refused_at_.push_back(began);
                    }
                    std::this_thread::sleep_for(every);
                }
            });
    }
    ~Arrivals() {
        stop();
        SSL_CTX_free(ctx_);
    }
    void stop() {
        stop_ = true;
        for (auto& t : ts_)
            if (t.joinable()) t.join();
    }
    size_t count(const std::string& by) {
        std::lock_guard g(mu_);
        return served_[by];
    }
    size_t total() {
        std::lock_guard g(mu_);
        size_t n = 0;
        for (auto& [by, k] : served_) n += k;
        return n;
    }
    // Refused or reset clients that began connecting after `t`. One that was in flight when the
    // previous process stopped (accepted, not yet connected upstream: closed by the handover; or
    // anything not yet in the crash copy) may be refused, as kprism(8) says; none after.
    size_t refused_since(std::chrono::steady_clock::time_point t) {
        std::lock_guard g(mu_);
        return static_cast<size_t>(std::count_if(refused_at_.begin(), refused_at_.end(), [&](auto x) { return x >= t; }));
    }
    std::string summary() {
        std::lock_guard g(mu_);
        std::string s;
        for (auto& [by, k] : served_) s += (by.empty() ? "refused" : by) + "=" + std::to_string(k) + " ";
        return s;
    }

private:
    std::string one(int port) {
        int fd = connect_to(port);
        if (fd < 0) return "";
        timeval tv{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        SSL* ssl = SSL_new(ctx_);
        SSL_set_fd(ssl, fd);
        std::string by;
        const std::string req = "GET /client HTTP/1.1\r\nHost: kprism\r\nConnection: close\r\n\r\n";
        if (SSL_connect(ssl) == 1 && SSL_write(ssl, req.data(), static_cast<int>(req.size())) > 0) {
            std::string resp;
            char buf[4096];
            for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<size_t>(n));
            if (auto p = resp.find("served by "); p != std::string::npos)
                by = resp.substr(p + 10, resp.find(' ', p + 10) - p - 10);
        }
        SSL_free(ssl);
        ::close(fd);
        return by;
    }

    SSL_CTX* ctx_ = nullptr;
    std::atomic<bool> stop_{false};
    std::vector<std::thread> ts_;
    std::mutex mu_;
    std::map<std::string, size_t> served_;
    std::vector<std::chrono::steady_clock::time_point> refused_at_;
};

// Two stand-ins, "good" answering 200 and "bad" 500, and a kprism that has judged both.
struct TwoApiservers {
    Pki pki;
    Apiserver good{pki, "good"}, bad{pki, "bad"};
    TwoApiservers() { bad.set("500"); }
    std::vector<std::string> endpoints() const { return {good.addr(), bad.addr()}; }
    bool judged(const Process& k) const {
        return k.wait_output("msg=\"upstream up\" upstream=" + good.addr(), 10000ms) &&
               k.wait_output("msg=\"upstream down\" upstream=" + bad.addr(), 10000ms);
    }
};

const char* const kFailModes[] = {"fail-open", "fail-closed"};

}  // namespace

// SIGUSR2 with one apiserver down (500): not one client of those arriving every few milliseconds
// around the restart reaches it, and none is refused (fail-closed refuses only when nothing is
// up, and one is). Before, the new process started every upstream unknown for up to a second:
// failing open sent clients to both, failing closed reset them.
TEST(RestartHealth, InPlaceRoutesNoClientToADownApiserver) {
    for (const char* mode : kFailModes) {
        SCOPED_TRACE(mode);
        TwoApiservers s;
        Kprism k(s.endpoints(), checked(s.pki, {"--fail-mode", mode}));
        ASSERT_TRUE(s.judged(k)) << k.output();
        Arrivals clients(s.pki, k.port);
        ASSERT_TRUE(eventually([&] { return clients.count("good") >= 20; })) << clients.summary() << k.output();
        k.signal(SIGUSR2);
        ASSERT_TRUE(k.wait_output("msg=\"resumed connections handed over by the previous process\"", 10000ms))
            << k.output();
        const auto started = std::chrono::steady_clock::now();
        const size_t at_restart = clients.total();
        // A second of clients after the new process started, then some more.
        ASSERT_TRUE(eventually([&] { return clients.total() >= at_restart + 100; }, 10000ms)) << clients.summary();
        std::this_thread::sleep_for(1000ms);
        clients.stop();
        EXPECT_EQ(clients.count("bad"), 0u) << clients.summary() << k.output();
        EXPECT_EQ(clients.refused_since(started), 0u) << "refused or reset: " << clients.summary() << k.output();
        EXPECT_NE(k.output().find("msg=\"upstream health taken over from the previous process\" from=handover "
                                  "carried=2 too_old=0"),
                  std::string::npos)
            << k.output();
        EXPECT_EQ(k.output().find("msg=\"upstream up\" upstream=" + s.good.addr() + " was=unknown",
                                  k.output().find("executing the new kprism")),
                  std::string::npos)
            << "its verdict carried, not found again: " << k.output();
    }
}

// The same through systemd's fd store (SIGTERM, the next process started with what was stored),
// and after a crash (SIGKILL, keep_on_crash): the next process routes as the previous one did.
TEST(RestartHealth, StoreAndCrashCopyRouteNoClientToADownApiserver) {
    for (const bool crash : {false, true})
        for (const char* mode : kFailModes) {
            SCOPED_TRACE(std::string(crash ? "crash copy " : "handover ") + mode);
            TwoApiservers s;
            FdStore store;
            const int port = free_port();
            const std::vector<std::string> flags = checked(s.pki, {"--fail-mode", mode});
            auto k1 = std::make_unique<Kprism>(s.endpoints(), flags, Spawn{{store.env(), "FDSTORE=64"}, {}}, port,
                                               free_port());
            ASSERT_TRUE(s.judged(*k1)) << k1->output();
            if (crash) {  // the copy of the health, rewritten each second, has the verdicts
                EXPECT_TRUE(eventually([&] {
                    return store.record("crash-health").find("up " + s.bad.addr() + " down ") != std::string::npos;
                })) << store.record("crash-health");
            }
            Arrivals clients(s.pki, port);
            ASSERT_TRUE(eventually([&] { return clients.count("good") >= 20; })) << clients.summary();
            k1->signal(crash ? SIGKILL : SIGTERM);
            k1->wait(10000ms);
            auto k2 = std::make_unique<Kprism>(s.endpoints(), flags, store.spawn_next({store.env(), "FDSTORE=64"}),
                                               port, free_port());
            ASSERT_TRUE(k2->wait_output("msg=started")) << k2->output();
            const auto started = std::chrono::steady_clock::now();
            const size_t at_restart = clients.total();
            ASSERT_TRUE(eventually([&] { return clients.total() >= at_restart + 100; }, 10000ms)) << clients.summary();
            std::this_thread::sleep_for(1000ms);
            clients.stop();
            EXPECT_EQ(clients.count("bad"), 0u) << clients.summary() << k2->output();
            EXPECT_EQ(clients.refused_since(started), 0u) << "refused or reset: " << clients.summary() << k2->output();
            EXPECT_NE(k2->output().find(std::string("msg=\"upstream health taken over from the previous process\" from=") +
                                        (crash ? "\"crash copy\"" : "handover") + " carried=2"),
                      std::string::npos)
                << k2->output();
        }
}

// A handover without a health record (from an older kprism, which writes none), or with one
// older than health.interval x health.fall, or one that does not parse: every upstream starts
// unknown, is checked at once, and new clients wait until each has its verdict; still not one
// reaches the apiserver that is down, and none is refused.
TEST(RestartHealth, WithoutAFreshRecordNewClientsWaitForTheChecks) {
    struct Case {
        const char* name;
        std::function<void(FdStore&)> change;
        const char* log;
    };
    const Case cases[] = {
        {"an older kprism's handover", [](FdStore& st) { st.drop("handover-health"); }, "error=\"no health record\""},
        {"too old",
         [](FdStore& st) {
             std::string r = st.record("handover-health");
             const size_t at = r.find("\nat ") + 4;
             r.replace(at, r.find('\n', at) - at, "1");  // written at the machine's boot
             const size_t end = r.rfind("end ");
             const std::string body = r.substr(0, end), count = r.substr(end, r.find(' ', end + 4) - end);
             st.replace_record("handover-health",
                               body + fmt::format("{} {:016x}\n", count, kprism::handover::health_checksum(body)));
         },
         "carried=0 too_old=2"},
        {"garbage", [](FdStore& st) { st.replace_record("handover-health", "kprism-health 1\nup x\n"); },
         "error=\"truncated (no end line)\""},
    };
    for (const Case& tc : cases)
        for (const char* mode : kFailModes) {
            SCOPED_TRACE(std::string(tc.name) + " " + mode);
            TwoApiservers s;
            FdStore store;
            const int port = free_port();
            const std::vector<std::string> flags = checked(s.pki, {"--fail-mode", mode});
            auto k1 = std::make_unique<Kprism>(s.endpoints(), flags, Spawn{{store.env(), "FDSTORE=64"}, {}}, port,
                                               free_port());
            ASSERT_TRUE(s.judged(*k1)) << k1->output();
            Arrivals clients(s.pki, port);
            ASSERT_TRUE(eventually([&] { return clients.count("good") >= 20; })) << clients.summary();
            k1->signal(SIGTERM);
            k1->wait(10000ms);
            tc.change(store);
            auto k2 = std::make_unique<Kprism>(s.endpoints(), flags, store.spawn_next({store.env(), "FDSTORE=64"}),
                                               port, free_port());
            ASSERT_TRUE(k2->wait_output("msg=started")) << k2->output();
            const auto started = std::chrono::steady_clock::now();
            const size_t at_restart = clients.total();
            ASSERT_TRUE(eventually([&] { return clients.total() >= at_restart + 100; }, 10000ms)) << clients.summary();
            clients.stop();
            EXPECT_EQ(clients.count("bad"), 0u) << clients.summary() << k2->output();
            EXPECT_EQ(clients.refused_since(started), 0u) << "refused or reset: " << clients.summary() << k2->output();
            const std::string out = k2->output();
            EXPECT_NE(out.find("msg=\"upstream health taken over from the previous process\""), std::string::npos) << out;
            EXPECT_NE(out.find(tc.log), std::string::npos) << out;
            EXPECT_NE(out.find("msg=\"restarted with upstreams not yet judged: new clients wait for their first checks\""),
                      std::string::npos)
                << out;
            EXPECT_NE(out.find("msg=\"new clients no longer wait: upstreams judged after the restart\" reason=\"every "
                               "upstream judged\""),
                      std::string::npos)
                << out;
        }
}

// The next process configured differently: the record's upstream that is no longer configured is
// ignored, the one still configured carries, the new one starts unknown and is checked at once;
// no client reaches the removed one or the new one (down).
TEST(RestartHealth, ARecordNamingAnUpstreamNoLongerConfiguredCarriesTheRest) {
    TwoApiservers s;
    Apiserver other(s.pki, "other");
    other.set("500");
    FdStore store;
    const int port = free_port();
    auto k1 = std::make_unique<Kprism>(s.endpoints(), checked(s.pki), Spawn{{store.env(), "FDSTORE=64"}, {}}, port,
                                       free_port());
    ASSERT_TRUE(s.judged(*k1)) << k1->output();
    Arrivals clients(s.pki, port);
    ASSERT_TRUE(eventually([&] { return clients.count("good") >= 20; })) << clients.summary();
    k1->signal(SIGTERM);
    k1->wait(10000ms);
    auto k2 = std::make_unique<Kprism>(std::vector<std::string>{s.good.addr(), other.addr()}, checked(s.pki),
                                       store.spawn_next({store.env(), "FDSTORE=64"}), port, free_port());
    ASSERT_TRUE(k2->wait_output("msg=\"upstream down\" upstream=" + other.addr() + " was=unknown")) << k2->output();
    const size_t at_restart = clients.total();
    ASSERT_TRUE(eventually([&] { return clients.total() >= at_restart + 50; }, 10000ms)) << clients.summary();
    clients.stop();
    EXPECT_EQ(clients.count("bad"), 0u) << clients.summary();
    EXPECT_EQ(clients.count("other"), 0u) << clients.summary();
    EXPECT_NE(k2->output().find("carried=1 too_old=0 not_configured=1 unknown=1"), std::string::npos) << k2->output();
    EXPECT_EQ(k2->output().find("msg=\"upstream up\" upstream=" + s.good.addr()), std::string::npos)
        << "its verdict carried: " << k2->output();
}

namespace {

// What /status says of the routing state: per upstream its verdict and why, and the node's
// conditions. last_change_unix too: a carried verdict keeps the moment it was reached.
std::string routing_state(int admin_port) {
    kprism::Json doc;
    std::string error;
    if (!kprism::parse_json(body_of(http_get(admin_port, "/status")), doc, error)) return "unparsable: " + error;
    std::string s = "fail_open=" + doc["fail_open"].dump() + " condition=" + doc["condition"].dump() +
                    " credentials=" + doc["credentials"]["state"].dump() + "\n";
    for (const auto& u : doc["upstreams"])
        for (const char* key : {"address", "state", "last_result", "last_error", "down_reason", "failing_checks",
                                "last_change_unix"})
            s += std::string(key) + "=" + u[key].dump() + (std::string(key) == "last_change_unix" ? "\n" : " ");
    return s;
}

}  // namespace

// The table of what must carry across a restart in place and a crash: for each state (set up by
// what the stand-ins answer), /status right after the new process started says the same as right
// before the restart, for every upstream and the node, and no client meanwhile went anywhere the
// state before forbade.
TEST(RestartHealth, WhatMustCarry) {
    const std::string etcd_lost =
        "body 500\n[+]ping ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n"
        "readyz check failed";
    struct State {
        const char* name;
        std::string a, b;         // what each stand-in answers
        const char* wait_for;     // in kprism's log once the state is reached
        const char* forbidden;    // no client may be served by this stand-in ("" none)
        bool judged;              // each upstream has a verdict (not while every apiserver rejects kprism)
    };
    const State states[] = {
        {"one up, one down with its failing checks", "200", etcd_lost, "msg=\"upstream down\"", "b", true},
        {"no etcd quorum (a hold: nothing closed, failing open)", etcd_lost, etcd_lost,
         "msg=\"control plane has no etcd quorum", "", true},
        {"client certificate rejected by every apiserver (the credentials condition)", "401", "401",
         "msg=\"client certificate rejected by every apiserver", "", false},
        {"both down, failing open", "503", "500", "msg=\"no upstream ready: failing open", "", true},
    };
    for (const bool crash : {false, true})
        for (const State& st : states) {
            SCOPED_TRACE(std::string(crash ? "crash copy: " : "in place: ") + st.name);
            Pki pki;
            Apiserver a(pki, "a"), b(pki, "b");
            a.set(st.a);
            b.set(st.b);
            FdStore store;
            const int port = free_port();
            auto k1 = std::make_unique<Kprism>(std::vector<std::string>{a.addr(), b.addr()}, checked(pki),
                                               crash ? Spawn{{store.env(), "FDSTORE=64"}, {}} : Spawn{}, port,
                                               free_port());
            ASSERT_TRUE(k1->wait_output(st.wait_for, 8000ms)) << k1->output();
            if (st.judged) {
                ASSERT_TRUE(eventually([&] { return routing_state(k1->admin_port).find("\"unknown\"") == std::string::npos; }));
            }
            // Settled: two answers after the state was reached, and (crash) in the copy.
            std::this_thread::sleep_for(1200ms);
            Arrivals clients(pki, port, 2, 10ms);
            ASSERT_TRUE(eventually([&] { return clients.total() >= 10; })) << clients.summary();
            const std::string before = routing_state(k1->admin_port);
            Process* k = k1.get();
            std::unique_ptr<Kprism> k2;
            int admin = k1->admin_port;
            if (crash) {
                k1->signal(SIGKILL);
                k1->wait(5000ms);
                k2 = std::make_unique<Kprism>(std::vector<std::string>{a.addr(), b.addr()}, checked(pki),
                                              store.spawn_next({store.env(), "FDSTORE=64"}), port, free_port());
                k = k2.get();
                admin = k2->admin_port;
                ASSERT_TRUE(k2->wait_output("msg=started")) << k2->output();
            } else {
                k1->signal(SIGUSR2);
                ASSERT_TRUE(k1->wait_output("msg=\"upstream health taken over from the previous process\"", 10000ms) ||
                            k1->wait_output("resumed connections handed over", 1000ms))
                    << k1->output();
                // The new image's admin endpoint, on the same port.
                ASSERT_TRUE(eventually([&] { return k1->count_output("msg=\"admin endpoint listening\"") == 2; }))
                    << k1->output();
            }
            const auto started = std::chrono::steady_clock::now();
            const std::string after = routing_state(admin);
            EXPECT_EQ(before, after) << k->output();
            std::this_thread::sleep_for(1000ms);
            clients.stop();
            if (*st.forbidden) {
                EXPECT_EQ(clients.count(st.forbidden), 0u) << clients.summary() << k->output();
            }
            EXPECT_EQ(clients.refused_since(started), 0u) << "refused or reset: " << clients.summary() << k->output();
        }
}

// "Every apiserver rejects the client certificate" carries only for the same certificate: fixed
// between two processes (the crash copy here: kubelet renewed it, then kprism restarted), the next
// one does not start in that condition, which would let clients go to every endpoint: it holds
// them until the checks with the new certificate answer, and none reaches the down apiserver.
TEST(RestartHealth, ARejectionCarriesOnlyForTheSameCertificate) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    b.set("500");
    const std::string cert = pki.dir + "/node.pem";
    std::filesystem::copy_file(pki.untrusted_client_pem, cert);
    std::vector<std::string> flags = checked(pki);
    flags[1] = flags[3] = cert;  // --client-cert, --client-key
    FdStore store;
    const int port = free_port();
    auto k1 = std::make_unique<Kprism>(std::vector<std::string>{a.addr(), b.addr()}, flags,
                                       Spawn{{store.env(), "FDSTORE=64"}, {}}, port, free_port());
    ASSERT_TRUE(k1->wait_output("msg=\"client certificate rejected by every apiserver", 8000ms)) << k1->output();
    std::this_thread::sleep_for(600ms);  // the crash copy's record (every 250 ms) has the condition
    k1->signal(SIGKILL);
    k1->wait(5000ms);
    std::filesystem::copy_file(pki.client_pem, cert, std::filesystem::copy_options::overwrite_existing);
    Kprism k2(std::vector<std::string>{a.addr(), b.addr()}, flags, store.spawn_next({store.env(), "FDSTORE=64"}), port,
              free_port());
    EXPECT_EQ(routing_state(k2.admin_port).find("credentials=\"rejected\""), std::string::npos)
        << routing_state(k2.admin_port) << k2.output();
    Arrivals clients(pki, port, 2, 10ms);
    ASSERT_TRUE(eventually([&] { return clients.total() >= 40; }, 10000ms)) << clients.summary();
    clients.stop();
    EXPECT_EQ(clients.count("b"), 0u) << clients.summary() << k2.output();
    EXPECT_GT(clients.count("a"), 0u) << clients.summary();
}
