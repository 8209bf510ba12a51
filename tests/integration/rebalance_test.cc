// SPDX-License-Identifier: Apache-2.0
// Rebalancing through the real binary: long-lived client connections that reconnect when closed
// (as kubelet does), an apiserver that goes down and comes back, and kprism moving its share back.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

// `n` TCP connections through kprism, each reopened as soon as kprism closes it.
class Holders {
public:
    Holders(int port, int n) : port_(port), fds_(n, -1) {
        for (auto& fd : fds_) fd = connect_to(port_);
        thread_ = std::thread([this] { loop(); });
    }
    ~Holders() {
        stop_ = true;
        thread_.join();
        for (int fd : fds_)
            if (fd >= 0) ::close(fd);
    }
    int reconnects() const { return reconnects_; }

private:
    void loop() {
        while (!stop_) {
            std::vector<pollfd> p;
            {
                std::lock_guard<std::mutex> l(mu_);
                for (int fd : fds_) p.push_back({fd, POLLIN, 0});
            }
            if (::poll(p.data(), p.size(), 50) <= 0) continue;
            std::lock_guard<std::mutex> l(mu_);
            for (size_t i = 0; i < p.size(); ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                char b[256];
                if (::read(fds_[i], b, sizeof b) > 0) continue;
                ::close(fds_[i]);
                fds_[i] = connect_to(port_);
                ++reconnects_;
            }
        }
    }
    int port_;
    std::vector<int> fds_;
    std::mutex mu_;
    std::atomic<bool> stop_{false};
    std::atomic<int> reconnects_{0};
    std::thread thread_;
};

// The newest "upstream stats" line's active= for `addr` (after a fresh SIGUSR1).
long active(Kprism& k, const std::string& addr) {
    k.stat("connections_active");
    std::string o = k.output();
    size_t at = o.rfind("msg=\"upstream stats\" upstream=" + addr + " ");
    if (at == std::string::npos) return -1;
    std::string line = o.substr(at, o.find('\n', at) - at);
    size_t a = line.find(" active=");
    return a == std::string::npos ? -1 : std::stol(line.substr(a + 8));
}

bool up(Kprism& k, const std::string& addr) {
    k.stat("connections_active");
    std::string o = k.output();
    size_t at = o.rfind("msg=\"upstream stats\" upstream=" + addr + " ");
    return at != std::string::npos && o.substr(at, o.find('\n', at) - at).find(" health=up ") != std::string::npos;
}

std::vector<std::string> flags(const Pki& pki, std::vector<std::string> more) {
    std::vector<std::string> f = {"--client-cert", pki.client_pem, "--client-key", pki.client_pem,
                                  "--ca-file", pki.ca_cert, "--health-interval", "1s", "--health-timeout", "500ms",
                                  "--health-fast-interval", "200ms"};
    f.insert(f.end(), more.begin(), more.end());
    return f;
}

}  // namespace

// b goes down: its connections move to a and c (close_on_down). b comes back holding nothing:
// rebalancing moves the oldest connections of a and c to it until each holds its share of 30
// (10, within one), at most max_per_minute, and then stops.
TEST(Rebalance, ReturningUpstreamGetsItsShareBack) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    Kprism k({a.addr(), b.addr(), c.addr()},
             flags(pki, {"--rebalance-interval", "1s", "--rebalance-min-age", "0s", "--rebalance-window", "300ms",
                         "--rebalance-max-per-minute", "600"}));
    ASSERT_TRUE(eventually([&] { return up(k, a.addr()) && up(k, b.addr()) && up(k, c.addr()); }, 10000ms));
    b.set("500");
    ASSERT_TRUE(eventually([&] { return k.output().find("upstream down") != std::string::npos; }, 10000ms));
    Holders h(k.port, 30);
    // Random placement over a and c may leave them uneven; rebalancing evens them out first.
    ASSERT_TRUE(eventually([&] { return active(k, a.addr()) == 15 && active(k, c.addr()) == 15; }, 10000ms));
    EXPECT_EQ(active(k, b.addr()), 0);
    std::this_thread::sleep_for(1500ms);
    const long before = k.stat("rebalanced");
    b.set("200");
    ASSERT_TRUE(eventually(
        [&] {
            long x = active(k, a.addr()), y = active(k, b.addr()), z = active(k, c.addr());
            return x + y + z == 30 && y >= 9 && x <= 11 && z <= 11;
        },
        15000ms))
        << k.output();
    std::this_thread::sleep_for(1500ms);  // closes still inside their 300 ms window land
    long moved = k.stat("rebalanced") - before;
    EXPECT_GE(moved, 9);
    EXPECT_LE(moved, 12) << "each move should land on the under-share upstream" << k.output();
    EXPECT_NE(k.output().find("msg=\"rebalancing: moving the oldest connections off upstreams over their share\""),
              std::string::npos);
    // Balanced: nothing more moves, and each holds its share within one.
    std::this_thread::sleep_for(3000ms);
    EXPECT_EQ(k.stat("rebalanced") - before, moved);
    for (auto* s : {&a, &b, &c}) {
        EXPECT_GE(active(k, s->addr()), 9) << s->name;
        EXPECT_LE(active(k, s->addr()), 11) << s->name;
    }
}

// The budget bounds the closes: 2 a minute moves 2 (the bucket starts full) and then waits.
TEST(Rebalance, MaxPerMinuteBoundsTheCloses) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, flags(pki, {"--rebalance-interval", "1s", "--rebalance-min-age", "0s",
                                               "--rebalance-window", "0s", "--rebalance-max-per-minute", "2"}));
    b.set("500");
    ASSERT_TRUE(eventually([&] { return k.output().find("upstream down") != std::string::npos; }, 10000ms));
    Holders h(k.port, 20);
    ASSERT_TRUE(eventually([&] { return active(k, a.addr()) == 20; }, 10000ms));
    b.set("200");
    ASSERT_TRUE(eventually([&] { return k.stat("rebalanced") == 2; }, 10000ms));
    std::this_thread::sleep_for(4000ms);
    EXPECT_EQ(k.stat("rebalanced"), 2);
    EXPECT_EQ(active(k, b.addr()), 2);
}

// Off, and young connections: nothing moves.
TEST(Rebalance, OffOrYoungConnectionsMoveNothing) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    for (auto extra : std::vector<std::vector<std::string>>{{"--rebalance=false", "--rebalance-min-age", "0s"},
                                                            {"--rebalance-min-age", "1h"}}) {
        std::vector<std::string> f = {"--rebalance-interval", "1s", "--rebalance-window", "0s"};
        f.insert(f.end(), extra.begin(), extra.end());
        b.set("200");
        Kprism k({a.addr(), b.addr()}, flags(pki, f));
        b.set("500");
        ASSERT_TRUE(eventually([&] { return k.output().find("upstream down") != std::string::npos; }, 10000ms));
        Holders h(k.port, 10);
        ASSERT_TRUE(eventually([&] { return active(k, a.addr()) == 10; }, 10000ms));
        b.set("200");
        ASSERT_TRUE(eventually([&] { return k.output().find("upstream up") != std::string::npos &&
                                            k.output().find("was=down") != std::string::npos; },
                               10000ms));
        std::this_thread::sleep_for(3000ms);
        EXPECT_EQ(k.stat("rebalanced"), 0) << extra[0];
        EXPECT_EQ(active(k, a.addr()), 10) << extra[0];
    }
}
