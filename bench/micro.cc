// SPDX-License-Identifier: Apache-2.0
// Google Benchmark micro-benchmarks (`make bench`): upstream pick, buffer pool, probe response parsing, config and flag parsing, metrics rendering.
//
// Everything runs the library's real code from libkprism.a on real objects: upstreams are set up
// through UpstreamPool's own state machine (record(), record_rtt()), configuration goes through
// load_config() as `kprism check` does. Nothing needs a Server or an event loop. The example
// configurations are read from packaging/examples/ relative to the working directory (the source
// tree, as `make bench` runs it). Usage: build/bench/micro [--benchmark_filter=Pick ...]
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kprism/proxy/buffer_pool.h"
#include "kprism/config/config.h"
#include "kprism/handoff/record.h"
#include "kprism/upstreams/http_response.h"
#include "kprism/base/log.h"
#include "kprism/admin/metrics.h"
#include "kprism/proxy/selection.h"
#include "kprism/upstreams/upstream.h"
#include "kprism/base/version.h"

using namespace kprism;

namespace {

// Setup logs "upstream up"/"upstream down" at info/warn through the real state machine.
[[maybe_unused]] const bool kQuiet = (log::set_level(log::Level::error), true);

constexpr uint64_t kNow = 10'000'000;  // loop time (ms) for every pick; no upstream is in backoff

// Probe RTTs (connect + TLS handshake, ms), cycled: a few near apiservers and some far ones. With
// 3 upstreams 1.2 and 1.5 form the latency tier; with 50 about half are in it.
constexpr double kRtts[] = {1.2, 1.5, 3.8, 0.9, 2.6, 7.5, 1.1, 12.0};

// `n` upstreams 10.0.x.y:6443, all brought up by a ready check, probe RTTs recorded, and active
// connection counts as least-connections keeps them (within one of each other, so about half tie).
// `mixed`: zones zone-a/b/c round robin with the node in zone-a, and every fifth upstream (from
// the second) down after a 500 - with 3 upstreams that is 10.0.0.2 (zone-b).
std::unique_ptr<UpstreamPool> make_pool(size_t n, bool mixed) {
    auto pool = std::make_unique<UpstreamPool>();
    if (mixed) pool->node_zone = "zone-a";
    static const char* const kZones[] = {"zone-a", "zone-b", "zone-c"};
    for (size_t i = 0; i < n; ++i) {
        HostPort hp;
        std::string err;
        if (!parse_host_port(fmt::format("10.0.{}.{}:6443", i / 250, i % 250 + 1), hp, &err)) return nullptr;
        Upstream* u = pool->add(hp, mixed ? kZones[i % 3] : "");
        if (!u) return nullptr;
        if (mixed && i % 5 == 1) pool->record(*u, CheckResult::not_ready, "HTTP 500: [-]etcd failed", true, kNow);
        else pool->record(*u, CheckResult::ready, "", false, kNow);
        u->active = static_cast<uint32_t>(10 + i % 2);
        u->total = 1000 + 17 * i;
    }
    for (size_t i = 0; i < n; ++i) pool->record_rtt((*pool)[i], kRtts[i % std::size(kRtts)]);
    return pool;
}

// 1. Upstream pick: pick_upstream() (eligibility, zone preference) plus the policy's choose(), as
// a new client connection does it (nothing tried yet).
void BM_Pick(benchmark::State& state, const char* policy_name, size_t n, bool mixed) {
    auto pool = make_pool(n, mixed);
    PolicyKind kind;
    auto policy = parse_policy(policy_name, kind) ? make_policy(kind) : nullptr;
    if (!pool || !policy) {
        state.SkipWithError("setup failed");
        return;
    }
    if (!pick_upstream(*pool, *policy, 0, kNow)) {
        state.SkipWithError("pick_upstream returned nullptr");
        return;
    }
    for (auto _ : state) {
        Upstream* u = pick_upstream(*pool, *policy, 0, kNow);
        benchmark::DoNotOptimize(u);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
    size_t up = pool->up_count(), tier = 0;
    for (size_t i = 0; i < pool->size(); ++i) tier += (*pool)[i].fast_tier;
    state.counters["up"] = static_cast<double>(up);
    if (std::string_view(policy_name) == "latency") state.counters["tier"] = static_cast<double>(tier);
}

[[maybe_unused]] const int kPickRegistered = [] {
    for (const char* policy : {"random", "least-connections", "latency"})
        for (size_t n : {size_t{3}, size_t{50}})
            for (bool mixed : {false, true})
                benchmark::RegisterBenchmark(fmt::format("Pick/{}/{}/{}", policy, n, mixed ? "mixed" : "all_up").c_str(),
                                             BM_Pick, policy, n, mixed);
    return 0;
}();

// 2. Buffer pool: one read buffer taken and given back (the free list's steady state).
void BM_BufferPoolGetPut(benchmark::State& state) {
    BufferPool pool;
    pool.put(pool.get());  // warm: one spare chunk
    for (auto _ : state) {
        char* c = pool.get();
        benchmark::DoNotOptimize(c);
        pool.put(c);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
    if (pool.allocations() != 1) state.SkipWithError("free list missed");
}
BENCHMARK(BM_BufferPoolGetPut)->Name("BufferPool/get_put");

// A burst of `range(0)` buffers taken, then all given back (many connections reading at once;
// within the default 64 spares, so the free list serves all of them).
void BM_BufferPoolBurst(benchmark::State& state) {
    const size_t n = static_cast<size_t>(state.range(0));
    BufferPool pool;
    std::vector<char*> held(n);
    for (auto& c : held) c = pool.get();
    for (auto* c : held) pool.put(c);
    for (auto _ : state) {
        for (auto& c : held) c = pool.get();
        benchmark::DoNotOptimize(held.data());
        benchmark::ClobberMemory();
        for (auto* c : held) pool.put(c);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
    if (pool.allocations() != n) state.SkipWithError("free list missed");
}
BENCHMARK(BM_BufferPoolBurst)->Name("BufferPool/get_put_burst")->Arg(16);

// For comparison: no spares kept (max_free 0), so every get() is a malloc of 64 KiB and every
// put() a free.
void BM_BufferPoolUncached(benchmark::State& state) {
    BufferPool pool(0);
    for (auto _ : state) {
        char* c = pool.get();
        benchmark::DoNotOptimize(c);
        pool.put(c);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_BufferPoolUncached)->Name("BufferPool/get_put_uncached");

// 3. Readiness probe responses as a kube-apiserver sends them (headers as of Kubernetes 1.30).
std::string response(int status, const char* reason, const std::string& body) {
    return fmt::format(
        "HTTP/1.1 {} {}\r\n"
        "Audit-Id: 7c1e5a4e-3f0b-4b8e-9d6a-2f1c8e0b9a51\r\n"
        "Cache-Control: no-cache, private\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "X-Kubernetes-Pf-Flowschema-Uid: 4a1f0c3e-6b2d-4e8f-a9c7-1d3b5e7f9a20\r\n"
        "X-Kubernetes-Pf-Prioritylevel-Uid: 8e2d4c6a-0b1f-4d3e-b5a7-9c1e3f5a7b92\r\n"
        "Date: Tue, 01 Dec 2026 09:00:00 GMT\r\n"
        "Content-Length: {}\r\n"
        "\r\n"
        "{}",
        status, reason, body.size(), body);
}

// /readyz?verbose-style body of an apiserver that lost etcd (it lists every check on failure).
const char kVerbose500Body[] =
    "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]etcd-readiness ok\n[+]informer-sync ok\n"
    "[+]poststarthook/start-apiserver-admission-initializer ok\n[+]poststarthook/generic-apiserver-start-informers ok\n"
    "[+]poststarthook/priority-and-fairness-config-consumer ok\n[+]poststarthook/priority-and-fairness-filter ok\n"
    "[+]poststarthook/storage-object-count-tracker-hook ok\n[+]poststarthook/start-apiextensions-informers ok\n"
    "[+]poststarthook/start-apiextensions-controllers ok\n[+]poststarthook/crd-informer-synced ok\n"
    "[+]poststarthook/start-service-ip-repair-controllers ok\n[+]poststarthook/rbac/bootstrap-roles ok\n"
    "[+]poststarthook/scheduling/bootstrap-system-priority-classes ok\n"
    "[+]poststarthook/priority-and-fairness-config-producer ok\n[+]poststarthook/start-system-namespaces-controller ok\n"
    "[+]poststarthook/bootstrap-controller ok\n[+]poststarthook/start-cluster-authentication-info-controller ok\n"
    "[+]poststarthook/start-kube-apiserver-identity-lease-controller ok\n"
    "[+]poststarthook/start-kube-apiserver-identity-lease-garbage-collector ok\n"
    "[+]poststarthook/start-legacy-token-tracking-controller ok\n[+]poststarthook/aggregator-reload-proxy-client-cert ok\n"
    "[+]poststarthook/start-kube-aggregator-informers ok\n[+]poststarthook/apiservice-registration-controller ok\n"
    "[+]poststarthook/apiservice-status-available-controller ok\n[+]poststarthook/apiservice-discovery-controller ok\n"
    "[+]poststarthook/kube-apiserver-autoregistration ok\n[+]autoregister-completion ok\n"
    "[+]poststarthook/apiservice-openapi-controller ok\n[+]poststarthook/apiservice-openapiv3-controller ok\n"
    "[+]shutdown ok\nreadyz check failed\n";

// A fresh parser per response (as each probe makes one), the whole response in one feed() (one
// TLS record), then what the checker reads: the status, and for a failure the body excerpt.
void BM_Readyz(benchmark::State& state, int status, bool excerpt) {
    const std::string r = status == 200 ? response(200, "OK", "ok")
                                        : response(500, "Internal Server Error", kVerbose500Body);
    for (auto _ : state) {
        HttpResponseParser p;
        auto st = p.feed(r.data(), r.size());
        benchmark::DoNotOptimize(st);
        int code = p.status();
        benchmark::DoNotOptimize(code);
        if (excerpt) {
            std::string body = p.body_excerpt();
            benchmark::DoNotOptimize(body.data());
        }
        benchmark::ClobberMemory();
    }
    HttpResponseParser check;
    if (check.feed(r.data(), r.size()) != HttpResponseParser::State::done || check.status() != status)
        state.SkipWithError("response not parsed as expected");
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * r.size()));
    state.counters["resp_bytes"] = static_cast<double>(r.size());
}
BENCHMARK_CAPTURE(BM_Readyz, 200_ok, 200, false)->Name("Readyz/200_ok");
BENCHMARK_CAPTURE(BM_Readyz, 500_verbose, 500, true)->Name("Readyz/500_verbose");

// 4. Configuration, through load_config() as `kprism check` calls it (stat, read, TOML, flags,
// validation); `check` adds render_config(), the text `kprism check` prints.
std::string example(const char* name) { return fmt::format("packaging/examples/{}.toml", name); }

bool readable(const std::string& path) { return std::ifstream(path).good(); }

void BM_ConfigLoadFile(benchmark::State& state, const char* name, bool render) {
    CommandLine cl;
    cl.command = Command::check;
    cl.config_file = example(name);
    if (!readable(cl.config_file)) {
        state.SkipWithError("packaging/examples/ not found: run from the source tree (make bench)");
        return;
    }
    for (auto _ : state) {
        Config cfg;
        std::vector<std::string> errors;
        bool ok = load_config(cl, cfg, errors);
        benchmark::DoNotOptimize(ok);
        if (render) {
            std::string out = render_config(cfg);
            benchmark::DoNotOptimize(out.data());
        }
        benchmark::DoNotOptimize(cfg.endpoints.data());
        benchmark::ClobberMemory();
        if (!ok) {
            state.SkipWithError(errors.empty() ? "invalid" : errors.front().c_str());
            break;
        }
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK_CAPTURE(BM_ConfigLoadFile, three, "three-control-planes", false)
    ->Name("Config/load_file/three-control-planes");
BENCHMARK_CAPTURE(BM_ConfigLoadFile, two_dcs, "two-dcs-witness", false)->Name("Config/load_file/two-dcs-witness");
BENCHMARK_CAPTURE(BM_ConfigLoadFile, check, "three-control-planes", true)
    ->Name("Config/check/three-control-planes");

// The same file's text already in memory: load_config_text() alone, without the file I/O.
void BM_ConfigLoadText(benchmark::State& state) {
    std::ifstream f(example("three-control-planes"), std::ios::binary);
    if (!f) {
        state.SkipWithError("packaging/examples/ not found: run from the source tree (make bench)");
        return;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    CommandLine cl;
    cl.command = Command::check;
    for (auto _ : state) {
        Config cfg;
        std::vector<std::string> errors;
        bool ok = load_config_text(text, "three-control-planes.toml", cl, cfg, errors);
        benchmark::DoNotOptimize(ok);
        benchmark::DoNotOptimize(cfg.endpoints.data());
        benchmark::ClobberMemory();
        if (!ok) {
            state.SkipWithError("invalid");
            break;
        }
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ConfigLoadText)->Name("Config/load_text/three-control-planes");

// The costliest files a reload parses on the event loop, each just under kMaxConfigFileBytes:
// what one SIGHUP with a hostile file can stall the loop for (rule I5: /healthz within 100 ms).
// Each is refused (unknown keys or sections, a list past kMaxListEntries), as such a file would be.
std::string hostile_config(const std::string& shape) {
    std::string text = "endpoints = [\"127.0.0.1:1\"]\n";
    if (shape == "keys") text += "[health]\n";
    if (shape == "endpoints") text = "endpoints = [";
    for (size_t i = 0;; ++i) {
        std::string unit = shape == "tables"      ? fmt::format("[t{}]\nk = \"v\"\n", i)
                           : shape == "keys"      ? fmt::format("k{} = 1\n", i)
                           : shape == "dotted"    ? fmt::format("a{}.b.c.d.e = 1\n", i)
                                                  : fmt::format("\"127.0.{}.{}:1\", ", (i >> 8) & 255, i & 255);
        if (text.size() + unit.size() + 2 > kMaxConfigFileBytes) break;
        text += unit;
    }
    if (shape == "endpoints") text += "\"127.0.0.1:2\"]\n";
    return text;
}

void BM_ConfigHostile(benchmark::State& state, const char* shape) {
    const std::string text = hostile_config(shape);
    CommandLine cl;
    cl.command = Command::check;
    for (auto _ : state) {
        Config cfg;
        std::vector<std::string> errors;
        bool ok = load_config_text(text, "hostile.toml", cl, cfg, errors);
        benchmark::DoNotOptimize(ok);
        benchmark::DoNotOptimize(errors.data());
        if (ok) {
            state.SkipWithError("a hostile file was accepted");
            break;
        }
    }
    state.counters["bytes"] = static_cast<double>(text.size());
}
BENCHMARK_CAPTURE(BM_ConfigHostile, tables, "tables")->Name("Config/hostile_64KiB/tables")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConfigHostile, keys, "keys")->Name("Config/hostile_64KiB/keys")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConfigHostile, dotted, "dotted")->Name("Config/hostile_64KiB/dotted")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ConfigHostile, endpoints, "endpoints")
    ->Name("Config/hostile_64KiB/endpoints")
    ->Unit(benchmark::kMillisecond);

// Flags: a typical command line, parsed (parse_command_line), then also applied and validated
// without a file (load_config), which is all `kprism check` does with it.
const char* const kArgv[] = {"kprism",
                             "check",
                             "--endpoints",
                             "10.0.0.11:6443,10.0.0.12:6443,10.0.0.13:6443",
                             "--policy",
                             "least-connections",
                             "--zone",
                             "zone-a",
                             "--health-interval",
                             "5s",
                             "--fail-mode=fail-closed",
                             "--log-level",
                             "debug",
                             "--allow-non-loopback"};
constexpr int kArgc = static_cast<int>(std::size(kArgv));

void BM_Flags(benchmark::State& state, bool load) {
    for (auto _ : state) {
        CommandLine cl;
        std::vector<std::string> errors;
        bool ok = parse_command_line(kArgc, kArgv, cl, errors);
        if (load && ok) {
            Config cfg;
            ok = load_config(cl, cfg, errors);
            benchmark::DoNotOptimize(cfg.endpoints.data());
        }
        benchmark::DoNotOptimize(ok);
        benchmark::DoNotOptimize(cl.flags.data());
        benchmark::ClobberMemory();
        if (!ok) {
            state.SkipWithError(errors.empty() ? "invalid" : errors.front().c_str());
            break;
        }
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK_CAPTURE(BM_Flags, parse, false)->Name("Flags/parse_command_line");
BENCHMARK_CAPTURE(BM_Flags, load, true)->Name("Flags/parse_and_load");

// 5. /metrics: render_metrics() of a StateView of `range(0)` upstreams (the mixed pool: three
// zones, a fifth down) with counters and check-duration histograms filled in as after a day.
void BM_Metrics(benchmark::State& state) {
    const size_t n = static_cast<size_t>(state.range(0));
    auto pool = make_pool(n, true);
    if (!pool) {
        state.SkipWithError("setup failed");
        return;
    }
    StateView s;
    s.version = kVersion;
    s.stats = Stats{.accepted = 123456, .rejected = 0, .accept_errors = 2, .client_failures = 7,
                    .connect_failures = 31, .replayed = 4, .closed_for_down = 55, .fail_open_episodes = 1,
                    .reloads_ok = 3, .reloads_failed = 1};
    s.connections_active = 20;
    s.client_cert_not_after = 1'830'000'000;
    s.heartbeat_age_seconds = 0.37;
    for (size_t i = 0; i < n; ++i) {
        Upstream& u = (*pool)[i];
        u.bytes_to_upstream = 3'000'000'000ULL + 12345 * i;
        u.bytes_from_upstream = 90'000'000'000ULL + 54321 * i;
        u.checks[static_cast<size_t>(CheckResult::ready)] = 17280;
        u.checks[static_cast<size_t>(CheckResult::timeout)] = 3 + i % 4;
        u.connect_errors[static_cast<size_t>(ConnectError::refused)] = i % 3;
        u.resumed_handshakes = 17000;
        u.full_handshakes = 283;
        for (int k = 0; k < 200; ++k) u.check_duration.observe(0.002 + 0.0007 * ((k * 7 + i) % 50));
        s.upstreams.push_back(&u);
    }
    size_t bytes = 0;
    for (auto _ : state) {
        std::string out = render_metrics(s);
        bytes = out.size();
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.counters["out_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Metrics)->Name("Metrics/render")->Arg(3)->Arg(50);

// One crash copy (src/handoff/crash_copy.cc, keep_on_crash) of N established connections, the work kprism
// does for it at most once a second: each connection's four addresses, the record, the memfd, and
// both sockets queued on a new carrier. N loopback TCP connections stand for the client and
// upstream sockets (one connection's two ends as one kprism connection's two sockets).
void BM_CrashCopy(benchmark::State& state) {
    const size_t n = static_cast<size_t>(state.range(0));
    int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 4096) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
        state.SkipWithError("listen");
        return;
    }
    std::vector<int> socks;
    for (size_t i = 0; i < n; ++i) {
        int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            state.SkipWithError("connect (RLIMIT_NOFILE?)");
            return;
        }
        socks.push_back(c);
        socks.push_back(::accept4(l, nullptr, nullptr, SOCK_CLOEXEC));
    }
    size_t bytes = 0;
    for (auto _ : state) {
        std::vector<kprism::handover::Entry> entries;
        for (size_t i = 0; i < n; ++i) {
            kprism::handover::Entry e;
            e.client_local = kprism::handover::local_address(socks[2 * i]);
            e.client_peer = kprism::handover::peer_address(socks[2 * i]);
            e.upstream_local = kprism::handover::local_address(socks[2 * i + 1]);
            e.upstream_peer = kprism::handover::peer_address(socks[2 * i + 1]);
            e.upstream = "10.0.0.1:6443";
            entries.push_back(std::move(e));
        }
        std::string record = kprism::handover::serialize(entries), error;
        bytes = record.size();
        int mfd = kprism::handover::record_memfd(record, error);
        size_t sent = 0;
        int carrier = kprism::handover::pack_fds(socks, sent, error);
        if (sent != socks.size()) state.SkipWithError(error.c_str());
        ::close(mfd);
        ::close(carrier);
    }
    for (int fd : socks) ::close(fd);
    ::close(l);
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
    state.counters["record_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_CrashCopy)->Name("CrashCopy/connections")->Arg(100)->Arg(1000)->Arg(4000)->Unit(benchmark::kMillisecond);

}  // namespace
