// SPDX-License-Identifier: Apache-2.0
// What must carry across a reload, for every key of the option table, and across a restart in
// place: each upstream's verdict and reason, the kept probe connections (across a reload), and
// every routing decision, with clients arriving throughout. The cases come from options(): a key added to the table is a case here, or the
// test fails until it has a value to change to.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <variant>

#include <nlohmann/json.hpp>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"
#include "kprism/config/config.h"

using namespace it;
using namespace kprism;

namespace {

using Clock = std::chrono::steady_clock;

std::string toml_str(const std::string& s) { return "\"" + s + "\""; }

std::string duration_text(int64_t ms) { return std::to_string(ms) + "ms"; }

// A TOML file from key = value lines, the dotted keys under their tables.
std::string toml_of(const std::map<std::string, std::string>& kv) {
    std::map<std::string, std::vector<std::string>> tables;
    for (const auto& [key, value] : kv) {
        size_t dot = key.find('.');
        std::string table = dot == std::string::npos ? "" : key.substr(0, dot);
        std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
        tables[table].push_back(leaf + " = " + value);
    }
    std::string out;
    for (const auto& [table, lines] : tables) {
        if (!table.empty()) out += "[" + table + "]\n";
        for (const auto& l : lines) out += l + "\n";
    }
    return out;
}

nlohmann::json status_of(int admin_port) {
    return nlohmann::json::parse(body_of(http_get(admin_port, "/status")), nullptr, false);
}

// Each upstream's verdict, result and reason, as /status says: what must carry.
std::map<std::string, std::string> verdicts(int admin_port) {
    std::map<std::string, std::string> out;
    nlohmann::json s = status_of(admin_port);
    if (!s.is_object() || !s["upstreams"].is_array()) return out;
    auto str = [](const nlohmann::json& u, const char* key) {
        auto it = u.find(key);
        return it != u.end() && it->is_string() ? it->get<std::string>() : std::string("-");
    };
    for (const auto& u : s["upstreams"])
        out[str(u, "address")] = str(u, "state") + " " + str(u, "last_result") + " " + str(u, "down_reason");
    return out;
}

// Probe handshakes an apiserver stand-in has logged (the probes' certificate: CN=system:node:test).
size_t probe_handshakes(const Apiserver& a) { return a.proc->count_output("handshake resumed="); }
// Client connections that reached it: the test's clients send no TLS, so each is a failed handshake.
size_t clients_reached(const Apiserver& a) { return a.proc->count_output("handshake failed"); }

}  // namespace

// For every key: a reload that changes it, then one that changes it back. Before and after each,
// /status shows the same verdict, result and reason for both upstreams (a: ready, b: 500 naming
// etcd), no client (one every 20 ms, throughout) reaches b, and no probe opens a new connection
// (the kept ones carry) unless the key is one whose change asks for a new one.
TEST(Carry, EveryKeyReloadedKeepsVerdictsAndRouting) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    b.set("500");
    const std::string dir = pki.dir + "/carry";
    std::filesystem::create_directories(dir);
    // The same files under other names: a path change with the same content changes nothing.
    std::filesystem::copy_file(pki.client_pem, dir + "/client-copy.pem");
    std::filesystem::copy_file(pki.ca_cert, dir + "/ca-copy.crt");

    std::map<std::string, std::string> base = {
        {"endpoints", "[" + toml_str(a.addr()) + ", " + toml_str(b.addr()) + "]"},
        {"health.client_cert", toml_str(pki.client_pem)},
        {"health.client_key", toml_str(pki.client_pem)},
        {"health.ca_file", toml_str(pki.ca_cert)},
        {"health.interval", toml_str("1s")},
        {"health.timeout", toml_str("500ms")},
        {"health.fast_interval", toml_str("200ms")},
        {"health.new_connection_interval", toml_str("1h")},  // no renewal of its own during the test
        {"discovery.snapshot_file", toml_str(dir + "/snapshot.json")},
    };
    // The changed value of a key whose type alone does not give one.
    const std::map<std::string, std::string> special = {
        {"bind_address", "[\"127.0.0.1\", \"127.0.0.3\"]"},
        {"zone", toml_str("zone-b")},
        {"health.path", toml_str("/readyz?verbose")},
        {"health.client_cert", toml_str(dir + "/client-copy.pem")},
        {"health.client_key", toml_str(dir + "/client-copy.pem")},
        {"health.ca_file", toml_str(dir + "/ca-copy.crt")},
        {"health.server_name", toml_str("localhost")},
        {"health.bind_address", toml_str("127.0.0.2")},
        {"discovery.snapshot_file", toml_str(dir + "/other.json")},
        {"discovery.allowed_cidrs", "[\"127.0.0.0/8\"]"},
    };
    // Keys whose change moves an upstream or asks for new probe connections, and why.
    const std::map<std::string, std::string> not_carried = {
        {"endpoints", "adds and removes upstreams (Reload.RemovedEndpointDrainsAndAddedOneServes)"},
    };
    const std::set<std::string> new_probe_connection = {
        "health.server_name",  // another name to verify: a new handshake
    };

    ConfigFile cf;
    cf.write(toml_of(base));
    Kprism k({}, {"--config", cf.path});
    const std::map<std::string, std::string> want = {{a.addr(), "up ready -"}, {b.addr(), "down not_ready etcd"}};
    ASSERT_TRUE(eventually([&] { return verdicts(k.admin_port) == want; }, 10000ms)) << k.output();

    std::atomic<bool> stop{false};
    std::atomic<int> sent{0};
    std::thread clients([&] {
        while (!stop) {
            int fd = connect_to(k.port);
            if (fd >= 0) {
                send_all(fd, "x\r\n\r\n", 5);
                ::shutdown(fd, SHUT_WR);
                recv_until_eof(fd, nullptr, 2000ms);
                ::close(fd);
                ++sent;
            }
            std::this_thread::sleep_for(20ms);
        }
    });
    ASSERT_TRUE(eventually([&] { return clients_reached(a) >= 3; })) << "the clients reach a";

    // The value a key changes to: from the table's type, bounds and choices, checked with
    // `kprism check` (a value its neighbours' bounds refuse is skipped for the next candidate).
    auto changed = [&](const OptionDef& o) -> std::string {
        if (auto it = special.find(o.key); it != special.end()) return it->second;
        std::vector<std::string> candidates;
        std::visit(
            [&](auto member) {
                using T = std::remove_cvref_t<decltype(std::declval<Settings&>().*member)>;
                const Settings d;
                if constexpr (std::is_same_v<T, bool>) {
                    candidates.push_back(d.*member ? "false" : "true");
                } else if constexpr (std::is_same_v<T, int64_t>) {
                    for (int64_t v : {d.*member + 1, d.*member - 1})
                        if (v >= o.min && v <= o.max) candidates.push_back(std::to_string(v));
                } else if constexpr (std::is_same_v<T, Duration>) {
                    int64_t now = (d.*member).count();
                    if (auto it = base.find(o.key); it != base.end())
                        now = it->second == toml_str("1s") ? 1000 : it->second == toml_str("500ms") ? 500
                            : it->second == toml_str("200ms") ? 200 : it->second == toml_str("1h") ? 3600000 : now;
                    for (int64_t v : {now * 2, now + 100, now / 2, o.min, o.max})
                        if (v != now && v >= o.min && v <= o.max) candidates.push_back(toml_str(duration_text(v)));
                } else if constexpr (std::is_same_v<T, std::string>) {
                    for (const char* c : o.choices)
                        if (c != d.*member) candidates.push_back(toml_str(c));
                }
            },
            o.field);
        for (const auto& c : candidates) {
            auto next = base;
            next[o.key] = c;
            ConfigFile probe;
            probe.write(toml_of(next));
            if (run({kprism_bin(), "check", "--config", probe.path}).code == 0) return c;
        }
        return "";
    };

    size_t events = 0;
    const size_t b_clients = clients_reached(b);
    // After an event: the verdicts as before, at once and after a check of each; no client on b.
    auto carried = [&] {
        EXPECT_EQ(verdicts(k.admin_port), want) << "at once after the event";
        const size_t checked_a = a.proc->count_output("path=/readyz"), checked_b = b.proc->count_output("path=/readyz");
        EXPECT_TRUE(eventually([&] {
            return a.proc->count_output("path=/readyz") > checked_a && b.proc->count_output("path=/readyz") > checked_b;
        }));
        EXPECT_EQ(verdicts(k.admin_port), want) << "after a check";
        EXPECT_EQ(clients_reached(b), b_clients) << "a client reached the apiserver that was down";
    };
    for (const OptionDef& o : options()) {
        if (not_carried.count(o.key)) continue;
        const std::string value = changed(o);
        ASSERT_FALSE(value.empty()) << o.key << ": no value to change it to (give it one in `special`)";
        auto next = base;
        next[o.key] = value;
        for (const auto* file : {&next, &base}) {
            SCOPED_TRACE(std::string(o.key) + " = " + (file == &next ? value : "back"));
            const size_t probes_before = probe_handshakes(a) + probe_handshakes(b);
            cf.write(toml_of(*file));
            auto r = run({kprism_bin(), "reload", "--health-port", std::to_string(k.admin_port), "--pid",
                          std::to_string(k.pid()), "--timeout", "10s"});
            ASSERT_EQ(r.code, 0) << r.output;
            ++events;
            carried();
            // Still on the same connections.
            if (!new_probe_connection.count(o.key)) {
                EXPECT_EQ(probe_handshakes(a) + probe_handshakes(b), probes_before)
                    << "a probe opened a new connection: the kept ones did not carry";
            }
        }
    }
    // Restarts in place (SIGUSR2: the same PID, the connections handed over, the probes on new
    // connections): the verdicts carry in the handover, and the clients still never reach b.
    for (int i = 0; i < 2; ++i) {
        SCOPED_TRACE("restart in place " + std::to_string(i + 1));
        const size_t started = k.count_output("msg=started");
        k.signal(SIGUSR2);
        ASSERT_TRUE(eventually([&] { return k.count_output("msg=started") > started; }, 10000ms)) << k.output();
        ++events;
        carried();
    }
    stop = true;
    clients.join();
    EXPECT_GE(events, 2 * (options().size() - not_carried.size()) + 2);
    EXPECT_EQ(clients_reached(b), b_clients);
    EXPECT_GT(clients_reached(a), 20u);
    RecordProperty("reloads", static_cast<int>(events));
    RecordProperty("clients", sent.load());
}
