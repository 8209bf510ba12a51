// SPDX-License-Identifier: Apache-2.0
// The admin HTTP endpoint of the real binary: every route, HTTP errors and bounds (405, 404,
// oversized heads, slowloris, the connection limit), /readyz against TLS stand-ins, the
// heartbeat after a stalled loop, /metrics checked by promtool, and `kprism status`.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "harness/harness.h"
#include "harness/apiserver.h"
#include "harness/pki.h"

using namespace it;

namespace {

struct Reply {
    int status = 0;  // 0: no HTTP answer (closed, reset or timed out)
    std::string head, body;
    std::string header(const std::string& name) const {
        std::string lower_head = head, n = name + ":";
        for (auto* s : {&lower_head, &n})
            for (char& c : *s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
        size_t at = lower_head.find("\r\n" + n);
        if (at == std::string::npos) return "";
        at += 2 + n.size();
        while (head[at] == ' ') ++at;
        return head.substr(at, head.find("\r\n", at) - at);
    }
};

Reply parse_reply(const std::string& raw) {
    Reply r;
    size_t end = raw.find("\r\n\r\n");
    if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return r;
    r.status = std::atoi(raw.c_str() + 9);
    r.head = raw.substr(0, end + 2);
    r.body = raw.substr(end + 4);
    return r;
}

// Sends `raw` on a new connection and reads the answer until the server closes.
Reply roundtrip(int port, const std::string& raw, std::chrono::milliseconds timeout = 5000ms) {
    int fd = connect_to(port);
    if (fd < 0) return {};
    send_all(fd, raw.data(), raw.size());
    std::string resp = recv_until_eof(fd, nullptr, timeout);
    ::close(fd);
    return parse_reply(resp);
}

Reply get(int port, const std::string& target, const std::string& method = "GET",
          std::chrono::milliseconds timeout = 5000ms) {
    return roundtrip(port, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: admin-test\r\n\r\n",
                    timeout);
}

// Value of the sample `series` (name plus labels exactly as rendered), or -1.
double sample(const std::string& metrics, const std::string& series) {
    size_t at = 0;
    while ((at = metrics.find(series + " ", at)) != std::string::npos) {
        if (at == 0 || metrics[at - 1] == '\n') return std::stod(metrics.substr(at + series.size() + 1));
        at += series.size();
    }
    return -1;
}

std::string dead_endpoint() { return "127.0.0.1:" + std::to_string(refused_port()); }


std::vector<std::string> tls_flags(const Pki& pki) {
    return {"--client-cert",   pki.client_pem, "--client-key", pki.client_pem, "--ca-file", pki.ca_cert,
            "--health-interval", "1s", "--health-timeout", "500ms", "--health-fast-interval", "200ms"};
}

Result status_cmd(std::vector<std::string> args) {
    std::vector<std::string> argv = {kprism_bin(), "status"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, 10000ms);
}

// A local process that keeps the admin table full: `slots` connections, each reopened as soon as
// kprism has closed it (evicted or timed out), until destroyed.
class TableHog {
public:
    enum Mode {
        idle,    // connects and sends nothing
        drip,    // sends a request head one byte every 100 ms, never finishing it
        unread,  // sends GET /metrics, never reads the answer; reconnects after 0.9 s (kprism lingers 1 s)
    };
    TableHog(int port, Mode mode, int slots) : port_(port), mode_(mode), fds_(static_cast<size_t>(slots), -1) {
        thread_ = std::thread([this] { run(); });
    }
    ~TableHog() {
        stop_ = true;
        thread_.join();
        for (auto& s : fds_)
            if (s.fd >= 0) ::close(s.fd);
    }
    int open() const { return open_; }
    int closed_by_kprism() const { return closed_; }

private:
    struct Slot {
        Slot(int f) : fd(f) {}
        int fd;
        size_t sent = 0;
        Clock::time_point opened{};
    };
    const std::string kHead = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(1000, 's');

    void run() {
        while (!stop_) {
            int n = 0;
            for (auto& s : fds_) {
                if (s.fd >= 0 && gone(s)) {
                    ::close(s.fd);
                    s.fd = -1;
                }
                if (s.fd < 0) {
                    s = Slot(connect_to(port_));
                    s.opened = Clock::now();
                    if (s.fd >= 0 && mode_ == unread) {
                        std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
                        send_all(s.fd, req.data(), req.size());
                    }
                }
                if (s.fd >= 0 && mode_ == drip && s.sent < kHead.size() &&
                    Clock::now() - s.opened >= std::chrono::milliseconds(100 * s.sent))
                    s.sent += ::send(s.fd, &kHead[s.sent], 1, MSG_NOSIGNAL) == 1;
                n += s.fd >= 0;
            }
            open_ = n;
            std::this_thread::sleep_for(20ms);
        }
    }
    // kprism closed it (idle, drip), or it has held its place long enough (unread).
    bool gone(const Slot& s) {
        if (mode_ == unread) return Clock::now() - s.opened > 900ms;
        pollfd p{s.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) == 0) return false;
        ++closed_;
        return true;
    }

    int port_;
    Mode mode_;
    std::vector<Slot> fds_;
    std::atomic<bool> stop_{false};
    std::atomic<int> open_{0}, closed_{0};
    std::thread thread_;
};

// While `hog` holds the table, /healthz and /readyz each answer within 1 s (a liveness probe's
// default timeout), sample after sample (`samples` of each, 100 ms apart).
void probes_answer_while_held(const Kprism& k, const TableHog& hog, int samples = 20) {
    ASSERT_TRUE(eventually([&] { return hog.open() >= 64; }, 5000ms)) << hog.open();
    for (int i = 0; i < samples; ++i) {
        for (const char* path : {"/healthz", "/readyz"}) {
            auto t0 = Clock::now();
            Reply r = get(k.admin_port, path, "GET", 1000ms);
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
            EXPECT_EQ(r.status, std::string(path) == "/healthz" ? 200 : 503)
                << path << " sample " << i << " after " << ms << " ms, hog holds " << hog.open();
            EXPECT_LT(ms, 1000) << path << " sample " << i;
        }
        std::this_thread::sleep_for(100ms);
    }
}

}  // namespace

TEST(Admin, Routes) {
    std::string dead = dead_endpoint();
    Kprism k({dead});
    ASSERT_TRUE(k.wait_output("msg=\"admin endpoint listening\" address=127.0.0.1:" + std::to_string(k.admin_port)));

    Reply h = get(k.admin_port, "/healthz");
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(h.body, "ok\n");
    EXPECT_EQ(h.header("Content-Length"), "3");
    EXPECT_EQ(h.header("Connection"), "close");
    EXPECT_EQ(h.header("Content-Type"), "text/plain; charset=utf-8");

    // Without a client certificate the checks are paused: the upstream stays unknown, not ready.
    Reply r = get(k.admin_port, "/readyz");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.body, "not ready: no upstream is up\n");
    Reply rv = get(k.admin_port, "/readyz?verbose");
    EXPECT_EQ(rv.status, 503);
    EXPECT_EQ(rv.body, "[-]" + dead + " unknown\nnot ready: no upstream is up\n");

    Reply s = get(k.admin_port, "/status");
    EXPECT_EQ(s.status, 200);
    EXPECT_EQ(s.header("Content-Type"), "application/json");
    EXPECT_NE(s.body.find("\"ready\":false"), std::string::npos) << s.body;
    EXPECT_NE(s.body.find("{\"address\":\"" + dead + "\",\"zone\":\"\",\"source\":\"static\",\"state\":\"unknown\",\"last_result\":null"),
              std::string::npos)
        << s.body;

    Reply m = get(k.admin_port, "/metrics");
    EXPECT_EQ(m.status, 200);
    EXPECT_EQ(m.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_EQ(sample(m.body, "kprism_upstream_state{upstream=\"" + dead + "\",state=\"unknown\"}"), 1);

    Reply nf = get(k.admin_port, "/nope");
    EXPECT_EQ(nf.status, 404);
    EXPECT_EQ(get(k.admin_port, "/").status, 404);
    EXPECT_EQ(get(k.admin_port, "/healthz/").status, 404);

    for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
        Reply na = get(k.admin_port, "/healthz", method);
        EXPECT_EQ(na.status, 405) << method;
        EXPECT_EQ(na.header("Allow"), "GET, HEAD") << method;
    }
    Reply body = roundtrip(k.admin_port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_EQ(body.status, 405);

    // HEAD: the headers of the GET, no body.
    Reply head = get(k.admin_port, "/metrics", "HEAD");
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.body, "");
    EXPECT_GT(std::stoul(head.header("Content-Length")), 1000u);
    Reply hh = get(k.admin_port, "/healthz", "HEAD");
    EXPECT_EQ(hh.status, 200);
    EXPECT_EQ(hh.header("Content-Length"), "3");
    EXPECT_EQ(hh.body, "");

    EXPECT_EQ(roundtrip(k.admin_port, "GET /healthz HTTP/1.0\r\n\r\n").status, 200);
    EXPECT_EQ(roundtrip(k.admin_port, "GET /healthz HTTP/1.1\r\n\r\n").status, 400) << "no Host";
    EXPECT_EQ(roundtrip(k.admin_port, "\x16\x03\x01\x00\x05hello").status, 400) << "TLS on the plain port";
    EXPECT_EQ(roundtrip(k.admin_port, "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n").status, 505);
    // Pipelined: one request, one answer, then the connection closes.
    Reply one = roundtrip(k.admin_port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(one.status, 200);
    EXPECT_EQ(one.body, "ok\n");
}

TEST(Admin, ConnectErrorsCountedByReason) {
    std::string dead = dead_endpoint();
    Kprism k({dead});
    for (int i = 0; i < 2; ++i) {
        int fd = connect_to(k.port);
        ASSERT_GE(fd, 0);
        recv_until_eof(fd, nullptr, 5000ms);  // reset: the only upstream refused
        ::close(fd);
    }
    std::string m;
    const std::string refused = "kprism_upstream_connect_errors_total{upstream=\"" + dead + "\",reason=\"refused\"}";
    EXPECT_TRUE(eventually([&] {
        m = get(k.admin_port, "/metrics").body;
        return sample(m, refused) == 2;
    })) << m;
    EXPECT_EQ(sample(m, "kprism_upstream_connect_errors_total{upstream=\"" + dead + "\",reason=\"timeout\"}"), 0);
    EXPECT_EQ(sample(m, "kprism_client_failures_total"), 2);
    EXPECT_EQ(sample(m, "kprism_connections_accepted_total"), 2);
}

TEST(Admin, MetricsPassPromtool) {
    const char* promtool = access("/usr/bin/promtool", X_OK) == 0 ? "/usr/bin/promtool" : nullptr;
    if (!promtool) GTEST_SKIP() << "promtool is not installed (Debian package prometheus)";
    Pki pki;
    Apiserver a(pki, "a");
    std::string dead = dead_endpoint();
    Kprism k({a.addr(), dead}, tls_flags(pki));
    std::string m;
    ASSERT_TRUE(eventually([&] {
        m = get(k.admin_port, "/metrics").body;
        return sample(m, "kprism_upstream_state{upstream=\"" + a.addr() + "\",state=\"up\"}") == 1 &&
               sample(m, "kprism_upstream_state{upstream=\"" + dead + "\",state=\"down\"}") == 1;
    }, 10000ms)) << m;
    char path[] = "/tmp/kprism-metrics-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    std::ofstream(path, std::ios::binary) << m;
    auto r = run({"/bin/sh", "-c", std::string(promtool) + " check metrics < " + path});
    unlink(path);
    EXPECT_EQ(r.code, 0) << r.output << "\n" << m;
    EXPECT_EQ(r.output, "") << "promtool lint findings";

    const std::string up = "{upstream=\"" + a.addr() + "\"}";
    EXPECT_EQ(sample(m, "kprism_upstream_transitions_total{upstream=\"" + a.addr() + "\",to=\"up\"}"), 1);
    EXPECT_GE(sample(m, "kprism_health_checks_total{upstream=\"" + a.addr() + "\",result=\"ready\"}"), 1);
    EXPECT_GE(sample(m, "kprism_health_checks_total{upstream=\"" + dead + "\",result=\"connect_failed\"}"), 1);
    EXPECT_GE(sample(m, "kprism_health_check_duration_seconds_count" + up), 1);
    EXPECT_GE(sample(m, "kprism_health_check_duration_seconds_bucket{upstream=\"" + a.addr() + "\",le=\"+Inf\"}"), 1);
    EXPECT_GT(sample(m, "kprism_upstream_probe_rtt_seconds" + up), 0);
    EXPECT_LT(sample(m, "kprism_upstream_probe_rtt_seconds" + up), 1);
    EXPECT_EQ(m.find("kprism_upstream_probe_rtt_seconds{upstream=\"" + dead), std::string::npos) << "never measured";
    EXPECT_GE(sample(m, "kprism_tls_handshakes_total{upstream=\"" + a.addr() + "\",resumed=\"false\"}"), 1);
    long long not_after = Pki::not_after(pki.client_pem);
    EXPECT_EQ(sample(m, "kprism_client_certificate_expiry_timestamp_seconds"), static_cast<double>(not_after));
    EXPECT_GE(sample(m, "kprism_heartbeat_age_seconds"), 0);
    EXPECT_LT(sample(m, "kprism_heartbeat_age_seconds"), 2);
    EXPECT_EQ(sample(m, "kprism_fail_open_active"), 0);
    EXPECT_EQ(sample(m, "kprism_config_reloads_total{result=\"success\"}"), 0);
    std::string version = run({kprism_bin(), "--version"}).output;  // "kprism VERSION\n"
    version = version.substr(7, version.find('\n') - 7);
    EXPECT_EQ(sample(m, "kprism_build_info{version=\"" + version + "\"}"), 1);
}

TEST(Admin, ReadyzAndStatusFollowTheUpstreams) {
    Pki pki;
    Apiserver a(pki, "a");
    std::string dead = dead_endpoint();
    Kprism k({a.addr(), dead}, tls_flags(pki));
    ASSERT_TRUE(eventually([&] { return get(k.admin_port, "/readyz").status == 200; }, 10000ms));
    ASSERT_TRUE(eventually([&] { return get(k.admin_port, "/readyz?verbose").body.find("[-]" + dead + " down") != std::string::npos; }, 10000ms));
    Reply v = get(k.admin_port, "/readyz?verbose");
    EXPECT_EQ(v.status, 200);
    EXPECT_NE(v.body.find("[+]" + a.addr() + " up\n"), std::string::npos) << v.body;
    EXPECT_NE(v.body.find("[-]" + dead + " down: connect_failed: connection refused\n"), std::string::npos) << v.body;
    EXPECT_EQ(v.body.substr(v.body.size() - 3), "ok\n");

    auto st = status_cmd({"--health-port", std::to_string(k.admin_port)});
    EXPECT_EQ(st.code, 0) << st.output;
    EXPECT_NE(st.output.find("1 of 2 upstreams up"), std::string::npos) << st.output;
    EXPECT_NE(st.output.find("UPSTREAM"), std::string::npos);
    EXPECT_NE(st.output.find("LAST RESULT"), std::string::npos);
    EXPECT_EQ(st.output.find('\x1b'), std::string::npos) << "no colour when stdout is not a terminal";
    auto row = [&](const std::string& out, const std::string& addr) {
        size_t at = out.find("\n" + addr + " ");
        return at == std::string::npos ? "" : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    };
    EXPECT_NE(row(st.output, a.addr()).find(" up "), std::string::npos) << st.output;
    EXPECT_NE(row(st.output, a.addr()).find(" ready "), std::string::npos) << st.output;
    EXPECT_NE(row(st.output, a.addr()).find("ms "), std::string::npos) << "RTT: " << st.output;
    EXPECT_NE(row(st.output, dead).find(" down "), std::string::npos) << st.output;
    EXPECT_NE(row(st.output, dead).find("connection refused"), std::string::npos) << st.output;

    a.set("500");
    ASSERT_TRUE(eventually([&] { return get(k.admin_port, "/readyz").status == 503; }, 10000ms));
    Reply down = get(k.admin_port, "/readyz?verbose");
    EXPECT_NE(down.body.find("[-]" + a.addr() + " down: not_ready: HTTP 500"), std::string::npos) << down.body;
    Reply s = get(k.admin_port, "/status");
    EXPECT_NE(s.body.find("\"ready\":false"), std::string::npos) << s.body;
    EXPECT_NE(s.body.find("\"fail_open\":true"), std::string::npos) << s.body;
    EXPECT_NE(s.body.find("\"last_result\":\"not_ready\""), std::string::npos) << s.body;
    auto none = status_cmd({"--health-port", std::to_string(k.admin_port)});
    EXPECT_EQ(none.code, 1) << none.output;
    EXPECT_NE(none.output.find("0 of 2 upstreams up"), std::string::npos) << none.output;

    a.set("200");
    EXPECT_TRUE(eventually([&] { return get(k.admin_port, "/readyz").status == 200; }, 10000ms));
}

TEST(Admin, StatusCommandAddressAndErrors) {
    int unused = refused_port();
    auto r = status_cmd({"--health-port", std::to_string(unused)});
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("kprism status: cannot reach the admin endpoint at 127.0.0.1:" + std::to_string(unused) +
                            ": connection refused"),
              std::string::npos)
        << r.output;

    // The port from a config file that has no endpoints: status needs none.
    std::string dead = dead_endpoint();
    Kprism k({dead});
    char path[] = "/tmp/kprism-status-XXXXXX";
    int fd = mkstemp(path);
    std::string toml = "[health]\nport = " + std::to_string(k.admin_port) + "\n";
    ASSERT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
    ::close(fd);
    auto c = status_cmd({"--config", path});
    unlink(path);
    EXPECT_EQ(c.code, 1) << c.output;
    EXPECT_NE(c.output.find(dead), std::string::npos) << c.output;
    EXPECT_NE(c.output.find("unknown"), std::string::npos) << c.output;

    auto bad = status_cmd({"--health-port", "nope"});
    EXPECT_EQ(bad.code, 2) << bad.output;

    // Something that is not kprism on the port.
    TcpServer other([](int cfd) {
        char buf[1024];
        ::recv(cfd, buf, sizeof buf, 0);
        const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        send_all(cfd, resp, sizeof resp - 1);
    });
    auto wrong = status_cmd({"--health-port", std::to_string(other.port())});
    EXPECT_EQ(wrong.code, 2) << wrong.output;
    EXPECT_NE(wrong.output.find("unexpected answer from the admin endpoint"), std::string::npos) << wrong.output;

    // A port that accepts but never answers: the 3 s timeout.
    TcpServer silent([](int cfd) {
        char buf[1024];
        while (::recv(cfd, buf, sizeof buf, 0) > 0) {
        }
    });
    auto t0 = Clock::now();
    auto slow = status_cmd({"--health-port", std::to_string(silent.port())});
    EXPECT_EQ(slow.code, 2) << slow.output;
    EXPECT_NE(slow.output.find("timed out after 3s"), std::string::npos) << slow.output;
    EXPECT_LT(Clock::now() - t0, 6s);
}

TEST(Admin, OversizedRequests) {
    Kprism k({dead_endpoint()});
    std::string big = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n";
    Reply r = roundtrip(k.admin_port, big);
    EXPECT_TRUE(r.status == 431 || r.status == 0) << r.status;
    EXPECT_EQ(r.status, 431) << "the answer survives the unread bytes";
    Reply uri = get(k.admin_port, "/" + std::string(5000, 'u'));
    EXPECT_EQ(uri.status, 414);
    // A client that keeps sending after the answer is cut off; kprism is fine.
    int fd = connect_to(k.admin_port);
    std::string flood(1 << 20, 'x');
    send_all(fd, flood.data(), flood.size());  // may fail midway once kprism closes
    ::close(fd);
    EXPECT_EQ(get(k.admin_port, "/healthz").status, 200);
    EXPECT_TRUE(k.running());
}

TEST(Admin, SlowlorisIsClosedWithinTheRequestTimeout) {
    Kprism k({dead_endpoint()});
    int fd = connect_to(k.admin_port);
    ASSERT_GE(fd, 0);
    auto t0 = Clock::now();
    const std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 's');
    bool closed = false;
    for (size_t i = 0; i < req.size() && Clock::now() - t0 < 10s; ++i) {
        if (::send(fd, &req[i], 1, MSG_NOSIGNAL) != 1) {
            closed = true;
            break;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 250) > 0) {
            closed = true;
            break;
        }
        // Meanwhile other requests are answered at once.
        if (i == 4) {
            EXPECT_EQ(get(k.admin_port, "/healthz", "GET", 1000ms).status, 200);
        }
    }
    auto elapsed = Clock::now() - t0;
    EXPECT_TRUE(closed) << "still open after the whole trickle";
    EXPECT_GE(elapsed, 4500ms);
    EXPECT_LE(elapsed, 7000ms);
    char c;
    EXPECT_LE(::recv(fd, &c, 1, 0), 0) << "no answer, just a close";
    ::close(fd);

    // An idle connection (nothing sent) is closed the same way.
    int idle = connect_to(k.admin_port);
    auto t1 = Clock::now();
    recv_until_eof(idle, nullptr, 10000ms);
    EXPECT_GE(Clock::now() - t1, 4500ms);
    EXPECT_LE(Clock::now() - t1, 7000ms);
    ::close(idle);
}

// At 64 connections, a new one takes the place of the oldest that has sent no request for 200 ms;
// one that has been answered (kprism waits up to 1 s for its FIN) is kept while such a one is left.
TEST(Admin, ConnectionLimit) {
    Kprism k({dead_endpoint()});
    auto closed = [](int fd, int wait_ms) {  // readable: an answer or a close from kprism
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, wait_ms) == 1;
    };
    std::vector<int> fds;
    for (int i = 0; i < 64; ++i) fds.push_back(connect_to(k.admin_port));
    std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fds[0], req.data(), req.size());
    ASSERT_TRUE(closed(fds[0], 2000)) << "the oldest is answered";
    std::this_thread::sleep_for(300ms);  // the 63 silent ones are idle: 200 ms without a request
    int extra = connect_to(k.admin_port);
    ASSERT_GE(extra, 0);
    EXPECT_TRUE(closed(fds[1], 1000)) << "the oldest connection without a request makes room";
    char c;
    EXPECT_LE(::recv(fds[1], &c, 1, MSG_DONTWAIT), 0) << "no answer, just a close";
    for (size_t i = 2; i < fds.size(); ++i) EXPECT_FALSE(closed(fds[i], 0)) << "connection " << i;
    EXPECT_EQ(parse_reply(recv_until_eof(fds[0], nullptr, 3000ms)).status, 200) << "the answer is intact";
    // The newcomer is served.
    send_all(extra, req.data(), req.size());
    EXPECT_EQ(parse_reply(recv_until_eof(extra, nullptr, 3000ms)).status, 200);
    ::close(extra);
    for (int fd : fds) ::close(fd);
    EXPECT_TRUE(eventually([&] { return get(k.admin_port, "/healthz", "GET", 1000ms).status == 200; }, 3000ms));
}

// A full table of answered connections, then a probe whose request has not arrived yet, then one
// more connection: an answered one makes room, not the probe (it is the oldest that has sent
// nothing, but it connected this moment), and the probe is answered.
TEST(Admin, ProbeWhoseRequestIsOnItsWayKeepsItsPlace) {
    Kprism k({dead_endpoint()});
    std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    std::vector<int> answered;
    for (int i = 0; i < 63; ++i) {  // the table holds 64
        answered.push_back(connect_to(k.admin_port));
        ASSERT_GE(answered.back(), 0);
        send_all(answered.back(), req.data(), req.size());
    }
    for (int fd : answered) {  // each answered, and kept for up to 1 s while kprism waits for our FIN
        pollfd p{fd, POLLIN, 0};
        ASSERT_EQ(::poll(&p, 1, 2000), 1);
    }
    int probe = connect_to(k.admin_port), extra = connect_to(k.admin_port);
    ASSERT_GE(probe, 0);
    ASSERT_GE(extra, 0);
    send_all(probe, req.data(), req.size());
    EXPECT_EQ(parse_reply(recv_until_eof(probe, nullptr, 3000ms)).status, 200) << "the probe kept its place";
    send_all(extra, req.data(), req.size());
    EXPECT_EQ(parse_reply(recv_until_eof(extra, nullptr, 3000ms)).status, 200);
    int lost = 0;
    for (int fd : answered) {
        lost += parse_reply(recv_until_eof(fd, nullptr, 3000ms)).status != 200;
        ::close(fd);
    }
    EXPECT_EQ(lost, 0) << "every answer delivered whole, also to the one that made room";
    ::close(probe);
    ::close(extra);
}

// kprism stopped while a probe and then 70 more clients connect and send their requests: when it
// runs again it accepts the 71 in one burst, more than the table holds. Each is answered as it is
// accepted, so those that make room (the probe among them: the oldest) have their answers whole.
TEST(Admin, BurstOfNewConnectionsEachAnswered) {
    Kprism k({dead_endpoint()});
    ASSERT_EQ(get(k.admin_port, "/healthz").status, 200);
    ASSERT_EQ(::kill(k.pid(), SIGSTOP), 0);
    std::string probe_req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    std::vector<int> fds;
    for (int i = 0; i < 71; ++i) {  // in the kernel's accept queue (128) until kprism runs
        fds.push_back(connect_to(k.admin_port));
        const std::string& r = i == 0 ? probe_req : req;
        if (fds.back() >= 0) send_all(fds.back(), r.data(), r.size());
    }
    ASSERT_EQ(::kill(k.pid(), SIGCONT), 0);
    ASSERT_GE(fds[0], 0);
    Reply probe = parse_reply(recv_until_eof(fds[0], nullptr, 3000ms));
    EXPECT_EQ(probe.status, 200) << "the probe, first of the burst";
    int whole = 0;
    for (size_t i = 1; i < fds.size(); ++i) {
        whole += fds[i] >= 0 && parse_reply(recv_until_eof(fds[i], nullptr, 3000ms)).status == 200;
        ::close(fds[i]);
    }
    ::close(fds[0]);
    EXPECT_EQ(whole, 70) << "every answer delivered, also to those closed to make room";
    EXPECT_TRUE(k.running());
}

// A local process that holds every admin slot cannot silence the liveness and readiness probes.
TEST(Admin, ProbesAnswerWhileIdleConnectionsHoldTheTable) {
    Kprism k({dead_endpoint()});
    TableHog hog(k.admin_port, TableHog::idle, 70);
    probes_answer_while_held(k, hog);
    EXPECT_GT(hog.closed_by_kprism(), 20) << "each probe made room";
    EXPECT_TRUE(k.running());
}

TEST(Admin, ProbesAnswerWhileSlowHeadsHoldTheTable) {
    Kprism k({dead_endpoint()});
    TableHog hog(k.admin_port, TableHog::drip, 70);
    probes_answer_while_held(k, hog, 60);  // past the 5 s head deadline, while the heads are replaced
    EXPECT_TRUE(k.running());
}

TEST(Admin, ProbesAnswerWhileUnreadAnswersHoldTheTable) {
    Kprism k({dead_endpoint()});
    TableHog hog(k.admin_port, TableHog::unread, 70);
    probes_answer_while_held(k, hog);
    EXPECT_TRUE(k.running());
}

// SIGURG with KPRISM_TEST_HOOKS=1 blocks the loop for 7 s. The request sent meanwhile waits in
// the kernel; its answer, the first after the stall, must say the heartbeat was stale, and a
// later one that all is well again.
TEST(Admin, HeartbeatReportsAStalledLoop) {
    Kprism k({dead_endpoint()}, {}, Spawn{{"KPRISM_TEST_HOOKS=1"}, {}});
    ASSERT_TRUE(k.wait_output("test hooks enabled"));
    EXPECT_EQ(get(k.admin_port, "/healthz").status, 200);
    k.signal(SIGURG);
    ASSERT_TRUE(k.wait_output("test hook: stalling the event loop", 3000ms));
    auto t0 = Clock::now();
    Reply stalled = get(k.admin_port, "/healthz", "GET", 15000ms);
    EXPECT_GE(Clock::now() - t0, 5000ms) << "answered only after the stall";
    EXPECT_EQ(stalled.status, 503) << stalled.body;
    EXPECT_NE(stalled.body.find("stalled for 7"), std::string::npos) << stalled.body;
    ASSERT_TRUE(k.wait_output("test hook: stall over"));
    EXPECT_EQ(get(k.admin_port, "/healthz").status, 503) << "still within 10 s of the stall";
    EXPECT_TRUE(eventually([&] { return get(k.admin_port, "/healthz").status == 200; }, 15000ms));
    EXPECT_TRUE(k.running());
}

TEST(Admin, PortInUseIsAStartupFailure) {
    TcpServer taken(nullptr);
    auto r = run({kprism_bin(), "--endpoints", dead_endpoint(), "--bind-port", std::to_string(free_port()),
                  "--health-port", std::to_string(taken.port())});
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("cannot listen on the admin address 127.0.0.1:" + std::to_string(taken.port())),
              std::string::npos)
        << r.output;
}
