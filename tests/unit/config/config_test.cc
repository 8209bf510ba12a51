// SPDX-License-Identifier: Apache-2.0
// Configuration: command line, TOML, flags over file, whole-config validation, rendering (kprism/config/config.h).
#include "kprism/config/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "kprism/base/address.h"
#include "kprism/base/address_rules.h"

namespace kprism {
namespace {

using namespace std::chrono_literals;

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += "\n  " + s;
    return out.empty() ? "\n  (no errors)" : out;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

bool any_contains(const std::vector<std::string>& errors, const std::string& needle) {
    for (const auto& e : errors)
        if (contains(e, needle)) return true;
    return false;
}

#define EXPECT_ERROR(errors, needle) EXPECT_TRUE(any_contains(errors, needle)) << "want '" << (needle) << "' in:" << joined(errors)

CommandLine parse_args(std::initializer_list<const char*> args) {
    std::vector<const char*> argv{"kprism"};
    argv.insert(argv.end(), args);
    CommandLine cl;
    std::vector<std::string> errors;
    EXPECT_TRUE(parse_command_line(static_cast<int>(argv.size()), argv.data(), cl, errors)) << joined(errors);
    return cl;
}

std::vector<std::string> arg_errors(std::initializer_list<const char*> args) {
    std::vector<const char*> argv{"kprism"};
    argv.insert(argv.end(), args);
    CommandLine cl;
    std::vector<std::string> errors;
    EXPECT_FALSE(parse_command_line(static_cast<int>(argv.size()), argv.data(), cl, errors));
    return errors;
}

struct Loaded {
    bool ok = false;
    Config cfg;
    std::vector<std::string> errors;
};

// Parses `args` then loads `toml` as "test.toml" with those flags over it.
Loaded load(std::string_view toml, std::initializer_list<const char*> args = {}) {
    Loaded r;
    std::vector<const char*> argv{"kprism"};
    argv.insert(argv.end(), args);
    CommandLine cl;
    if (!parse_command_line(static_cast<int>(argv.size()), argv.data(), cl, r.errors)) return r;
    r.ok = load_config_text(toml, "test.toml", cl, r.cfg, r.errors);
    EXPECT_EQ(r.ok, r.errors.empty()) << joined(r.errors);
    return r;
}

Config load_ok(std::string_view toml, std::initializer_list<const char*> args = {}) {
    Loaded r = load(toml, args);
    EXPECT_TRUE(r.ok) << joined(r.errors);
    return r.cfg;
}

std::vector<std::string> load_bad(std::string_view toml, std::initializer_list<const char*> args = {}) {
    Loaded r = load(toml, args);
    EXPECT_FALSE(r.ok) << "config unexpectedly accepted";
    EXPECT_FALSE(r.errors.empty());
    return r.errors;
}

std::string sa_str(const sockaddr_storage& ss) { return sockaddr_str(reinterpret_cast<const sockaddr*>(&ss)); }

const char* kEp = "endpoints = [\"10.0.0.1:6443\"]\n";
std::string ep_line() { return kEp; }

// ---------------------------------------------------------------- command line

TEST(CommandLine, DefaultsToRun) {
    CommandLine cl = parse_args({});
    EXPECT_EQ(cl.command, Command::run);
    EXPECT_TRUE(cl.config_file.empty());
    EXPECT_TRUE(cl.flags.empty());
}

TEST(CommandLine, Commands) {
    EXPECT_EQ(parse_args({"run"}).command, Command::run);
    EXPECT_EQ(parse_args({"check"}).command, Command::check);
    EXPECT_EQ(parse_args({"version"}).command, Command::version);
    EXPECT_EQ(parse_args({"help"}).command, Command::help);
    EXPECT_EQ(parse_args({"--version"}).command, Command::version);
    EXPECT_EQ(parse_args({"-v"}).command, Command::version);
    EXPECT_EQ(parse_args({"--help"}).command, Command::help);
    EXPECT_EQ(parse_args({"-h"}).command, Command::help);
    EXPECT_EQ(parse_args({"--bind-port", "1", "check"}).command, Command::check);
}

TEST(CommandLine, ConfigBothForms) {
    EXPECT_EQ(parse_args({"--config", "/etc/kprism.toml"}).config_file, "/etc/kprism.toml");
    EXPECT_EQ(parse_args({"--config=/etc/k.toml"}).config_file, "/etc/k.toml");
}

TEST(CommandLine, FlagValueForms) {
    CommandLine a = parse_args({"--bind-port=9000"});
    CommandLine b = parse_args({"--bind-port", "9000"});
    ASSERT_EQ(a.flags.size(), 1u);
    ASSERT_EQ(b.flags.size(), 1u);
    EXPECT_STREQ(a.flags[0].first->key, "bind_port");
    EXPECT_EQ(a.flags[0].first, b.flags[0].first);
    EXPECT_EQ(a.flags[0].second, "9000");
    EXPECT_EQ(b.flags[0].second, "9000");
    // "=" keeps the rest verbatim, including further '=' and an empty value.
    EXPECT_EQ(parse_args({"--endpoints=a:1"}).flags[0].second, "a:1");
    EXPECT_EQ(parse_args({"--policy="}).flags[0].second, "");
}

TEST(CommandLine, FlagsKeepOrder) {
    CommandLine cl = parse_args({"--bind-port=1", "--policy", "random", "--bind-port=2"});
    ASSERT_EQ(cl.flags.size(), 3u);
    EXPECT_EQ(cl.flags[0].second, "1");
    EXPECT_EQ(cl.flags[1].second, "random");
    EXPECT_EQ(cl.flags[2].second, "2");
}

TEST(CommandLine, BoolFlagWithoutValue) {
    CommandLine cl = parse_args({"--allow-non-loopback", "--tcp-nodelay"});
    ASSERT_EQ(cl.flags.size(), 2u);
    EXPECT_STREQ(cl.flags[0].first->key, "allow_non_loopback");
    EXPECT_EQ(cl.flags[0].second, "true");
    EXPECT_EQ(cl.flags[1].second, "true");
    // A bool flag does not consume the next argument.
    CommandLine c2 = parse_args({"--allow-non-loopback", "check"});
    EXPECT_EQ(c2.command, Command::check);
    EXPECT_EQ(c2.flags.size(), 1u);
}

TEST(CommandLine, Errors) {
    EXPECT_ERROR(arg_errors({"--endpoint", "a:1"}), "unknown flag --endpoint (did you mean 'endpoints'?)");
    EXPECT_ERROR(arg_errors({"--helth-port=1"}), "unknown flag --helth-port (did you mean 'health-port'?)");
    EXPECT_ERROR(arg_errors({"--bindport=1"}), "did you mean 'bind-port'?");
    auto far = arg_errors({"--zzzzzzzzzzzz"});
    EXPECT_ERROR(far, "unknown flag --zzzzzzzzzzzz");
    EXPECT_FALSE(any_contains(far, "did you mean")) << joined(far);
    EXPECT_ERROR(arg_errors({"--bind-port"}), "--bind-port: missing value");
    EXPECT_ERROR(arg_errors({"--config"}), "--config: missing value");
    EXPECT_ERROR(arg_errors({"foo"}), "unexpected argument 'foo'");
    EXPECT_ERROR(arg_errors({"check", "check"}), "unexpected argument 'check'");
    EXPECT_ERROR(arg_errors({"-x"}), "unexpected argument '-x'");
    EXPECT_ERROR(arg_errors({"--"}), "unexpected argument '--'");
    // Every error is reported, not just the first.
    auto many = arg_errors({"--nope", "stray", "--bind-port"});
    EXPECT_EQ(many.size(), 3u) << joined(many);
}

// ---------------------------------------------------------------- defaults and basics

TEST(Config, Defaults) {
    Config c = load_ok(kEp);
    EXPECT_EQ(c.s.bind_address, std::vector<std::string>{"127.0.0.1"});
    EXPECT_EQ(c.s.bind_port, 7445);
    EXPECT_FALSE(c.s.allow_non_loopback);
    EXPECT_EQ(c.s.health_bind_address, "127.0.0.1");
    EXPECT_EQ(c.s.health_port, 7446);
    EXPECT_EQ(c.s.health_interval, 5s);
    EXPECT_EQ(c.s.health_timeout, 3s);
    EXPECT_EQ(c.s.policy, "random");
    EXPECT_EQ(c.s.connect_timeout, 2s);
    EXPECT_EQ(c.s.drain_timeout, 30s);
    EXPECT_EQ(c.s.max_connections, 10000);
    EXPECT_TRUE(c.s.tcp_nodelay);
    EXPECT_EQ(c.s.log_level, "info");
    EXPECT_EQ(c.s.log_format, "logfmt");
    ASSERT_EQ(c.listen.size(), 1u);
    EXPECT_EQ(sa_str(c.listen[0]), "127.0.0.1:7445");
    EXPECT_EQ(sa_str(c.admin), "127.0.0.1:7446");
    ASSERT_EQ(c.endpoints.size(), 1u);
    EXPECT_EQ(c.endpoints[0].addr.str(), "10.0.0.1:6443");
    EXPECT_TRUE(c.endpoints[0].addr.is_ip);
    EXPECT_EQ(c.endpoints[0].origin, "test.toml:1");
    EXPECT_EQ(c.config_file, "test.toml");
    EXPECT_EQ(c.origin.at("endpoints"), "test.toml:1");
    EXPECT_EQ(c.origin.count("bind_port"), 0u) << "defaults have no origin";
}

TEST(Config, EveryKeyFromFile) {
    Config c = load_ok(R"(endpoints = ["10.0.0.1:6443", "[fd00::2]:6443", "api.example.com:443"]
bind_address = ["127.0.0.2"]
bind_port = 8000
allow_non_loopback = false
policy = "least-connections"
connect_timeout = "500ms"
drain_timeout = "0"
max_connections = 5
resolve_interval = "1m"

[health]
bind_address = "::1"
port = 8001
interval = "10s"
timeout = "1500ms"

[tcp]
nodelay = false
keepalive = "0"
keepalive_interval = "2s"
keepalive_count = 9
user_timeout = "1m30s"

[log]
level = "debug"
format = "json"
)");
    EXPECT_EQ(c.endpoints.size(), 3u);
    EXPECT_EQ(c.endpoints[1].addr.host, "fd00::2");
    EXPECT_FALSE(c.endpoints[2].addr.is_ip);
    EXPECT_EQ(sa_str(c.listen.at(0)), "127.0.0.2:8000");
    EXPECT_EQ(c.s.policy, "least-connections");
    EXPECT_EQ(c.s.connect_timeout, 500ms);
    EXPECT_EQ(c.s.drain_timeout, 0ms);
    EXPECT_EQ(c.s.max_connections, 5);
    EXPECT_EQ(c.s.resolve_interval, 60s);
    EXPECT_EQ(sa_str(c.admin), "[::1]:8001");
    EXPECT_EQ(c.s.health_interval, 10s);
    EXPECT_EQ(c.s.health_timeout, 1500ms);
    EXPECT_FALSE(c.s.tcp_nodelay);
    EXPECT_EQ(c.s.tcp_keepalive, 0ms);
    EXPECT_EQ(c.s.tcp_keepalive_interval, 2s);
    EXPECT_EQ(c.s.tcp_keepalive_count, 9);
    EXPECT_EQ(c.s.tcp_user_timeout, 90s);
    EXPECT_EQ(c.s.log_level, "debug");
    EXPECT_EQ(c.s.log_format, "json");
    EXPECT_EQ(c.origin.at("bind_port"), "test.toml:3");
    EXPECT_EQ(c.origin.at("health.port"), "test.toml:13");
    EXPECT_EQ(c.origin.at("log.format"), "test.toml:26");
    // Every option set in the file has a file origin.
    for (const char* key : {"endpoints", "bind_address", "bind_port", "allow_non_loopback", "policy", "connect_timeout",
                            "drain_timeout", "max_connections", "resolve_interval", "health.bind_address", "health.port",
                            "health.interval", "health.timeout", "tcp.nodelay", "tcp.keepalive", "tcp.keepalive_interval",
                            "tcp.keepalive_count", "tcp.user_timeout", "log.level", "log.format"})
        EXPECT_TRUE(contains(c.origin[key], "test.toml:")) << key;
}

TEST(Config, DottedKeysAndInlineTables) {
    Config c = load_ok(std::string(kEp) + "health.port = 9001\ntcp = { keepalive_count = 4 }\n");
    EXPECT_EQ(c.s.health_port, 9001);
    EXPECT_EQ(c.s.tcp_keepalive_count, 4);
    EXPECT_EQ(c.origin.at("health.port"), "test.toml:2");
}

TEST(Config, EndpointsAsCommaString) {
    Config c = load_ok("endpoints = \" 10.0.0.1:6443 , 10.0.0.2:6443,,\"\n");
    ASSERT_EQ(c.endpoints.size(), 2u);
    EXPECT_EQ(c.endpoints[0].addr.str(), "10.0.0.1:6443");
    EXPECT_EQ(c.endpoints[1].addr.str(), "10.0.0.2:6443");
}

TEST(Config, EndpointArrayItemsTrimmed) {
    Config c = load_ok("endpoints = [\" 10.0.0.1:6443\"]\n");
    EXPECT_EQ(c.s.endpoints, std::vector<std::string>{"10.0.0.1:6443"});
}

TEST(Config, FlagsOnly) {
    Config c = load_ok("", {"--endpoints", "10.0.0.1:6443,10.0.0.2:6443"});
    ASSERT_EQ(c.endpoints.size(), 2u);
    EXPECT_EQ(c.endpoints[1].origin, "--endpoints");
    EXPECT_EQ(c.origin.at("endpoints"), "--endpoints");
}

TEST(Config, FlagsOverrideFile) {
    Config c = load_ok(std::string(kEp) + "bind_port = 8000\npolicy = \"least-connections\"\n",
                       {"--bind-port=9000", "--policy", "random", "--endpoints=10.0.0.9:1"});
    EXPECT_EQ(c.s.bind_port, 9000);
    EXPECT_EQ(c.s.policy, "random");
    EXPECT_EQ(sa_str(c.listen.at(0)), "127.0.0.1:9000");
    ASSERT_EQ(c.endpoints.size(), 1u) << "a list flag replaces the file's list";
    EXPECT_EQ(c.endpoints[0].addr.str(), "10.0.0.9:1");
    EXPECT_EQ(c.origin.at("bind_port"), "--bind-port");
    EXPECT_EQ(c.origin.at("policy"), "--policy");
    EXPECT_EQ(c.origin.at("endpoints"), "--endpoints");
}

TEST(Config, LastFlagWins) {
    Config c = load_ok(kEp, {"--bind-port=9000", "--bind-port", "9001"});
    EXPECT_EQ(c.s.bind_port, 9001);
}

TEST(Config, FlagFormsEquivalent) {
    Config a = load_ok(kEp, {"--health-interval=7s", "--connect-timeout=1s", "--max-connections=7"});
    Config b = load_ok(kEp, {"--health-interval", "7s", "--connect-timeout", "1s", "--max-connections", "7"});
    EXPECT_EQ(a.s.health_interval, 7s);
    EXPECT_EQ(b.s.health_interval, 7s);
    EXPECT_EQ(a.s.connect_timeout, b.s.connect_timeout);
    EXPECT_EQ(a.s.max_connections, 7);
    EXPECT_EQ(b.s.max_connections, 7);
}

TEST(Config, BoolFlags) {
    EXPECT_FALSE(load_ok(kEp, {"--tcp-nodelay=false"}).s.tcp_nodelay);
    EXPECT_FALSE(load_ok(kEp, {"--tcp-nodelay=off"}).s.tcp_nodelay);
    EXPECT_FALSE(load_ok(kEp, {"--tcp-nodelay=0"}).s.tcp_nodelay);
    EXPECT_TRUE(load_ok("endpoints=[\"10.0.0.1:1\"]\ntcp.nodelay=false\n", {"--tcp-nodelay"}).s.tcp_nodelay);
    EXPECT_TRUE(load_ok(kEp, {"--tcp-nodelay=yes"}).s.tcp_nodelay);
    EXPECT_TRUE(load_ok(kEp, {"--allow-non-loopback"}).s.allow_non_loopback);
}

TEST(Config, NonLoopbackBindAllowedWhenEnabled) {
    Config c = load_ok(kEp, {"--allow-non-loopback", "--bind-address=0.0.0.0", "--health-bind-address=10.1.1.1"});
    EXPECT_EQ(sa_str(c.listen.at(0)), "0.0.0.0:7445");
    EXPECT_EQ(sa_str(c.admin), "10.1.1.1:7446");
    Config f = load_ok(std::string(kEp) + "allow_non_loopback = true\nbind_address = [\"10.0.0.5\"]\n");
    EXPECT_EQ(sa_str(f.listen.at(0)), "10.0.0.5:7445");
}

TEST(Config, IPv6Bind) {
    Config a = load_ok(std::string(kEp) + "bind_address = [\"::1\"]\n");
    EXPECT_EQ(sa_str(a.listen.at(0)), "[::1]:7445");
    Config b = load_ok(kEp, {"--bind-address=[::1]"});
    EXPECT_EQ(sa_str(b.listen.at(0)), "[::1]:7445");
    Config c = load_ok(std::string(kEp) + "bind_address = [\"::ffff:127.0.0.1\"]\n");
    EXPECT_EQ(c.listen.size(), 1u);
}

TEST(Config, MultipleBindAddresses) {
    Config a = load_ok(std::string(kEp) + "bind_address = [\"127.0.0.1\", \"::1\", \"127.0.0.53\"]\nbind_port = 6443\n");
    ASSERT_EQ(a.listen.size(), 3u);
    EXPECT_EQ(sa_str(a.listen[0]), "127.0.0.1:6443");
    EXPECT_EQ(sa_str(a.listen[1]), "[::1]:6443");
    EXPECT_EQ(sa_str(a.listen[2]), "127.0.0.53:6443");
    Config b = load_ok(kEp, {"--bind-address", "127.0.0.1, ::1"});
    ASSERT_EQ(b.listen.size(), 2u);
    EXPECT_EQ(sa_str(b.listen[1]), "[::1]:7445");
}

TEST(Config, PolicyChoices) {
    EXPECT_EQ(load_ok(std::string(kEp) + "policy = \"random\"\n").s.policy, "random");
    EXPECT_EQ(load_ok(std::string(kEp) + "policy = \"least-connections\"\n").s.policy, "least-connections");
    EXPECT_EQ(load_ok(kEp, {"--policy=least-connections"}).s.policy, "least-connections");
    auto e = load_bad(kEp, {"--policy=Random"});
    EXPECT_ERROR(e, "--policy: invalid value \"Random\" (want one of: random, least-connections");
}

TEST(Config, BoundaryValuesAccepted) {
    Config c = load_ok(std::string(kEp) + "bind_port = 65535\nmax_connections = 1000000\n[health]\nport = 1\n"
                                          "interval = \"100ms\"\nfast_interval = \"100ms\"\ntimeout = \"99ms\"\n[tcp]\nkeepalive_count = 127\n");
    EXPECT_EQ(c.s.bind_port, 65535);
    EXPECT_EQ(c.s.health_port, 1);
    EXPECT_EQ(c.s.health_timeout, 99ms);
    EXPECT_EQ(c.s.tcp_keepalive_count, 127);
}

TEST(Config, HostnameEndpointDuplicateIsCaseInsensitive) {
    auto e = load_bad("endpoints = [\"API.example.com:6443\", \"api.example.com:6443\"]\n");
    EXPECT_ERROR(e, "test.toml:1: endpoints: duplicate endpoint 'api.example.com:6443'");
    // Same host, different port is fine.
    EXPECT_EQ(load_ok("endpoints = [\"a.example:1\", \"a.example:2\"]\n").endpoints.size(), 2u);
}

TEST(Config, AllErrorsReportedTogether) {
    auto e = load_bad("endpoints = [\"10.0.0.1:0\"]\nbind_port = 0\npolicy = \"x\"\nbogus = 1\n");
    EXPECT_ERROR(e, "test.toml:2: bind_port");
    EXPECT_ERROR(e, "test.toml:3: policy");
    EXPECT_ERROR(e, "test.toml:4: unknown key 'bogus'");
    EXPECT_EQ(e.size(), 3u) << "validation runs only once the values themselves are valid:" << joined(e);
    auto v = load_bad("endpoints = [\"10.0.0.1:0\", \"10.0.0.2:70000\"]\nbind_address = [\"10.9.9.9\"]\n");
    EXPECT_EQ(v.size(), 3u) << joined(v);
}

TEST(Config, FailureLeavesOutputUntouched) {
    CommandLine cl;
    Config c;
    c.config_file = "sentinel";
    std::vector<std::string> errors;
    EXPECT_FALSE(load_config_text("bind_port = 0\n", "t.toml", cl, c, errors));
    EXPECT_EQ(c.config_file, "sentinel");
    errors.clear();
    EXPECT_FALSE(load_config_text("a = = 1\n", "t.toml", cl, c, errors));
    EXPECT_EQ(c.config_file, "sentinel");
}

TEST(Config, UnknownKeyWithoutSuggestion) {
    auto e = load_bad(std::string(kEp) + "zzzzzzzzzzzzzz = 1\n");
    EXPECT_ERROR(e, "test.toml:2: unknown key 'zzzzzzzzzzzzzz'");
    EXPECT_FALSE(any_contains(e, "did you mean")) << joined(e);
}

// Endpoints in inline-table form carry a zone and a TLS server name.
TEST(Config, EndpointTables) {
    Config c = load_ok(R"(endpoints = [
  { address = "10.0.0.1:6443", zone = "a", server_name = "api-a" },
  "10.0.0.2:6443",
  { address = " 10.0.0.3:6443 ", zone = "b" },
]
)");
    ASSERT_EQ(c.endpoints.size(), 3u);
    EXPECT_EQ(c.endpoints[0].addr.str(), "10.0.0.1:6443");
    EXPECT_EQ(c.endpoints[0].zone, "a");
    EXPECT_EQ(c.endpoints[0].server_name, "api-a");
    EXPECT_EQ(c.endpoints[1].zone, "");
    EXPECT_EQ(c.endpoints[2].addr.str(), "10.0.0.3:6443");
    EXPECT_EQ(c.endpoints[2].zone, "b");
    // The rendering keeps the extras and loads back to the same endpoints.
    Loaded back = load(render_config(c));
    ASSERT_TRUE(back.ok) << joined(back.errors) << "\n" << render_config(c);
    ASSERT_EQ(back.cfg.endpoints.size(), 3u);
    EXPECT_EQ(back.cfg.endpoints[0].zone, "a");
    EXPECT_EQ(back.cfg.endpoints[0].server_name, "api-a");
    EXPECT_EQ(back.cfg.endpoints[2].zone, "b");
}

TEST(Config, EndpointTableErrors) {
    EXPECT_ERROR(load_bad("endpoints = [{ zone = \"a\" }]\n"), "test.toml:1: endpoints: endpoint table without address");
    EXPECT_ERROR(load_bad("endpoints = [{ address = \"10.0.0.1:1\", zome = \"a\" }]\n"),
                 "test.toml:1: endpoints: unknown endpoint field 'zome'");
    EXPECT_ERROR(load_bad("endpoints = [{ address = 5 }]\n"), "test.toml:1: endpoints: endpoint field 'address' wants a string");
    EXPECT_ERROR(load_bad("endpoints = [{ address = \"10.0.0.1:0\" }]\n"), "test.toml:1: endpoints: invalid address");
    // Tables are only for endpoints.
    EXPECT_ERROR(load_bad(ep_line() + "bind_address = [{ address = \"127.0.0.1\" }]\n"),
                 "test.toml:2: bind_address: want an array of strings");
}

// A table where a scalar option is expected is a type error for that option, not an "unknown
// section" that suggests itself ("unknown section [policy] (did you mean 'policy'?)").
TEST(Config, TableForScalarKeyIsATypeError) {
    auto e = load_bad(ep_line() + "policy = { a = 1 }\n");
    EXPECT_ERROR(e, "test.toml:2: policy: want a string");
    EXPECT_FALSE(any_contains(e, "did you mean 'policy'")) << joined(e);
    auto h = load_bad(ep_line() + "[bind_port]\n");
    EXPECT_FALSE(any_contains(h, "did you mean 'bind_port'")) << joined(h);
}

// The same IP literal spelled two ways is still the same upstream.
TEST(Config, DuplicateEndpointInOtherSpelling) {
    auto e = load_bad("endpoints = [\"[fd00::1]:6443\", \"[fd00:0:0::1]:6443\"]\n");
    EXPECT_ERROR(e, "duplicate endpoint '[fd00:0:0::1]:6443'");
}

// kprism never connects to itself: an endpoint that is one of its listeners is refused, a
// wildcard bind matching any local address with its port; the admin listener counts too.
TEST(Config, EndpointThatIsAListenerIsRefused) {
    EXPECT_ERROR(load_bad("endpoints = [\"10.0.0.1:6443\", \"127.0.0.1:7445\"]\n"),
                 "'127.0.0.1:7445' is an address kprism itself listens on");
    EXPECT_ERROR(load_bad("endpoints = [\"127.0.0.1:7446\"]\n"), "'127.0.0.1:7446' is an address kprism itself");
    EXPECT_ERROR(load_bad("endpoints = [\"[::ffff:127.0.0.1]:7445\"]\n"), "kprism itself listens on");
    EXPECT_ERROR(load_bad("endpoints = [\"127.0.0.1:9000\"]\nbind_port = 9000\n"), "kprism itself listens on");
    EXPECT_ERROR(load_bad("endpoints = [\"127.0.0.5:7445\"]\nbind_address = [\"0.0.0.0\"]\nallow_non_loopback = true\n"),
                 "'127.0.0.5:7445' is an address kprism itself listens on");
    EXPECT_ERROR(load_bad("endpoints = [\"[::1]:7445\"]\nbind_address = [\"::\"]\nallow_non_loopback = true\n"),
                 "kprism itself listens on");
    // The unspecified address connects to loopback: 0.0.0.0:7445 is the default listener.
    EXPECT_ERROR(load_bad("endpoints = [\"0.0.0.0:7445\"]\n"), "'0.0.0.0:7445' is an address kprism itself listens on");
    EXPECT_ERROR(load_bad("endpoints = [\"[::ffff:0.0.0.0]:7446\"]\n"), "kprism itself listens on");
    // Another port, or another loopback address than the one bound: not kprism.
    load_ok("endpoints = [\"127.0.0.1:6443\"]\n");
    load_ok("endpoints = [\"127.0.0.2:7445\"]\n");
}

TEST(Config, DiscoveryAllowedCidrs) {
    Config c = load_ok(std::string(kEp) + "[discovery]\nallowed_cidrs = [\"127.0.0.0/8\", \"fd00::/8\"]\n");
    ASSERT_EQ(discovery_allowed(c).size(), 2u);
    EXPECT_EQ(discovery_allowed(c)[0].str(), "127.0.0.0/8");
    EXPECT_EQ(discovery_allowed(c)[1].str(), "fd00::/8");
    EXPECT_EQ(discovery_allowed(load_ok(kEp, {"--discovery-allowed-cidrs=10.0.0.0/8,192.168.0.0/16"})).size(), 2u);
    EXPECT_TRUE(discovery_allowed(load_ok(kEp)).empty());
    EXPECT_ERROR(load_bad(std::string(kEp) + "[discovery]\nallowed_cidrs = [\"10.0.0.1\"]\n"),
                 "discovery.allowed_cidrs: '10.0.0.1' is not a CIDR");
    EXPECT_ERROR(load_bad(std::string(kEp) + "[discovery]\nallowed_cidrs = [\"10.0.0.0/40\"]\n"), "prefix longer than 32");
}

// discovery.allowed_cidrs is restart-only: a reload that changes it leaves admission as it was,
// the networks included (not only the setting's text).
TEST(Config, ReloadKeepsDiscoveryAllowedCidrs) {
    const Config running = load_ok(std::string(kEp) + "[discovery]\nallowed_cidrs = [\"127.0.0.0/8\"]\n");
    Config next = load_ok(std::string(kEp) + "[discovery]\nallowed_cidrs = [\"10.0.0.0/8\", \"fd00::/8\"]\n");
    keep_restart_only_settings(running, next);
    const std::vector<Cidr> allowed = discovery_allowed(next);
    ASSERT_EQ(allowed.size(), 1u);
    EXPECT_EQ(allowed[0].str(), "127.0.0.0/8");
    sockaddr_storage ten{}, loop{};
    ASSERT_TRUE(ip_to_sockaddr("10.1.2.3", 6443, ten));
    ASSERT_TRUE(ip_to_sockaddr("127.0.0.9", 6443, loop));
    const OwnListeners none;
    const AddressRules rules(allowed, none);
    EXPECT_EQ(rules.refuse(as_sockaddr(ten)), "in no CIDR of discovery.allowed_cidrs");
    EXPECT_EQ(rules.refuse(as_sockaddr(loop)), "");
}

// Endpoint lists hold at most kMaxUpstreams (64): pick_upstream only looks at the first 64 and
// TriedSet is a 64-bit mask, so a 65th endpoint would silently never be used.
TEST(Config, MoreThan64EndpointsRejected) {
    std::string list;
    for (int i = 1; i <= 65; ++i) list += (list.empty() ? "" : ",") + std::string("10.0.1.") + std::to_string(i) + ":6443";
    Loaded r = load("", {"--endpoints", list.c_str()});
    EXPECT_FALSE(r.ok) << "65 endpoints accepted; upstreams past the 64th can never be picked";
    std::string sixty_four = list.substr(0, list.rfind(','));
    EXPECT_TRUE(load("", {"--endpoints", sixty_four.c_str()}).ok);
}

// ---------------------------------------------------------------- table of bad inputs

struct BadCase {
    const char* name;
    std::string toml;
    std::vector<const char*> flags;
    std::vector<std::string> want;  // substrings of one error each
};

std::string ep(const std::string& rest) { return std::string(kEp) + rest; }

std::vector<BadCase> bad_cases() {
    return {
        {"unknown_key", "endpoint = [\"10.0.0.1:6443\"]\n", {},
         {"test.toml:1: unknown key 'endpoint' (did you mean 'endpoints'?)"}},
        {"unknown_key_in_section", ep("[health]\nintervl = \"5s\"\n"), {},
         {"test.toml:3: unknown key 'health.intervl' (did you mean 'health.interval'?)"}},
        {"unknown_key_typo_top", ep("bind_prt = 1\n"), {},
         {"test.toml:2: unknown key 'bind_prt' (did you mean 'bind_port'?)"}},
        {"unknown_section", ep("[helth]\nport = 1\n"), {},
         {"test.toml:2: unknown section [helth] (did you mean 'health'?)"}},
        {"unknown_subsection", ep("[health.extra]\nport = 1\n"), {}, {"test.toml:2: unknown section [health.extra]"}},
        {"array_of_tables", ep("[[health]]\nport = 1\n"), {}, {"test.toml:2: 'health' is a section: write [health]"}},
        {"duplicate_endpoint", "endpoints = [\"10.0.0.1:6443\", \"10.0.0.1:6443\"]\n", {},
         {"test.toml:1: endpoints: duplicate endpoint '10.0.0.1:6443'"}},
        {"endpoint_port_0", "endpoints = [\"10.0.0.1:0\"]\n", {},
         {"test.toml:1: endpoints: invalid address '10.0.0.1:0': port 0 out of range 1-65535"}},
        {"endpoint_port_70000", "endpoints = [\"10.0.0.1:70000\"]\n", {},
         {"test.toml:1: endpoints: invalid address '10.0.0.1:70000': port 70000 out of range 1-65535"}},
        {"endpoint_no_port", "endpoints = [\"10.0.0.1\"]\n", {}, {"test.toml:1: endpoints: invalid address '10.0.0.1': missing port"}},
        {"endpoint_unbracketed_v6", "endpoints = [\"fd00::1:6443\"]\n", {}, {"test.toml:1: endpoints:", "need brackets"}},
        {"endpoint_bad_host", "endpoints = [\"bad host:6443\"]\n", {},
         {"test.toml:1: endpoints: invalid address 'bad host:6443': 'bad host' is not an IP address or hostname"}},
        {"endpoint_empty_string", "endpoints = [\"\"]\n", {}, {"test.toml:1: endpoints: invalid address ''"}},
        {"bind_port_0", ep("bind_port = 0\n"), {}, {"test.toml:2: bind_port: 0 out of range 1-65535"}},
        {"bind_port_70000", ep("bind_port = 70000\n"), {}, {"test.toml:2: bind_port: 70000 out of range 1-65535"}},
        {"bind_port_negative", ep("bind_port = -1\n"), {}, {"test.toml:2: bind_port: -1 out of range 1-65535"}},
        {"health_port_0", ep("[health]\nport = 0\n"), {}, {"test.toml:3: health.port: 0 out of range 1-65535"}},
        {"timeout_eq_interval", ep("[health]\ninterval = \"2s\"\ntimeout = \"2s\"\n"), {},
         {"test.toml:4: health.timeout: 2s must be shorter than health.interval (2s)"}},
        {"timeout_gt_interval", ep("[health]\ntimeout = \"6s\"\n"), {},
         {"test.toml:3: health.timeout: 6s must be shorter than health.interval (5s)"}},
        {"empty_endpoints", "endpoints = []\n", {}, {"no endpoints configured"}},
        {"no_endpoints_at_all", "", {}, {"no endpoints configured: pass --endpoints"}},
        {"invalid_toml", ep("bind_port = \n"), {}, {"test.toml:2:13: invalid TOML: "}},
        {"invalid_toml_column", ep("\n  policy = \"random\n"), {}, {"test.toml:3:19: invalid TOML: "}},
        {"invalid_toml_unterminated", ep("policy = \"random\n"), {}, {"test.toml:2:", "invalid TOML"}},
        {"invalid_toml_duplicate_key", ep("bind_port = 1\nbind_port = 2\n"), {}, {"test.toml:3:", "invalid TOML"}},
        {"string_for_int", ep("bind_port = \"7445\"\n"), {}, {"test.toml:2: bind_port: want an integer"}},
        {"float_for_int", ep("bind_port = 7445.0\n"), {}, {"test.toml:2: bind_port: want an integer"}},
        {"int_for_duration", ep("connect_timeout = 5\n"), {},
         {"test.toml:2: connect_timeout: want a duration string such as \"5s\""}},
        {"int_for_duration_in_section", ep("[health]\ninterval = 5000\n"), {},
         {"test.toml:3: health.interval: want a duration string"}},
        {"string_for_bool", ep("[tcp]\nnodelay = \"yes\"\n"), {}, {"test.toml:3: tcp.nodelay: want true or false"}},
        {"int_for_string", ep("policy = 1\n"), {}, {"test.toml:2: policy: want a string"}},
        {"int_for_list", "endpoints = 5\n", {}, {"test.toml:1: endpoints: want an array of strings"}},
        {"int_in_list", "endpoints = [\"10.0.0.1:1\", 2]\n", {}, {"test.toml:1: endpoints: want an array of strings"}},
        {"bad_duration", ep("connect_timeout = \"5\"\n"), {}, {"test.toml:2: connect_timeout: missing unit"}},
        {"sub_ms_duration", ep("drain_timeout = \"250us\"\n"), {},
         {"test.toml:2: drain_timeout: duration '250us' is not a whole number of milliseconds"}},
        {"duration_out_of_range", ep("connect_timeout = \"2m\"\n"), {},
         {"test.toml:2: connect_timeout: \"2m\" out of range 1ms-1m"}},
        {"duration_below_min", ep("[health]\ninterval = \"50ms\"\n"), {},
         {"test.toml:3: health.interval: \"50ms\" out of range 100ms-1h"}},
        {"max_connections_0", ep("max_connections = 0\n"), {}, {"test.toml:2: max_connections: 0 out of range 1-1000000"}},
        {"keepalive_count_200", ep("[tcp]\nkeepalive_count = 200\n"), {},
         {"test.toml:3: tcp.keepalive_count: 200 out of range 1-127"}},
        {"policy_choice", ep("policy = \"round-robin\"\n"), {},
         {"test.toml:2: policy: invalid value \"round-robin\" (want one of: random, least-connections"}},
        {"log_level_choice", ep("[log]\nlevel = \"trace\"\n"), {},
         {"test.toml:3: log.level: invalid value \"trace\" (want one of: debug, info, warn, error)"}},
        {"log_format_choice", ep("[log]\nformat = \"text\"\n"), {}, {"test.toml:3: log.format: invalid value \"text\""}},
        {"non_loopback_bind", ep("bind_address = [\"10.0.0.5\"]\n"), {},
         {"test.toml:2: bind_address: '10.0.0.5' is not a loopback address", "allow_non_loopback = true"}},
        {"wildcard_bind", ep("bind_address = [\"0.0.0.0\"]\n"), {},
         {"test.toml:2: bind_address: '0.0.0.0' is not a loopback address"}},
        {"v6_wildcard_bind", ep("bind_address = [\"::\"]\n"), {}, {"test.toml:2: bind_address: '::' is not a loopback"}},
        {"hostname_bind", ep("bind_address = [\"localhost\"]\n"), {},
         {"test.toml:2: bind_address: 'localhost' is not an IP address"}},
        {"empty_bind", ep("bind_address = []\n"), {}, {"test.toml:2: bind_address: no listen address"}},
        {"duplicate_bind", ep("bind_address = [\"::1\", \"[::1]\"]\n"), {},
         {"test.toml:2: bind_address: duplicate address '[::1]'"}},
        {"non_loopback_health", ep("[health]\nbind_address = \"0.0.0.0\"\n"), {},
         {"test.toml:3: health.bind_address: '0.0.0.0' is not a loopback address"}},
        {"hostname_health", ep("[health]\nbind_address = \"localhost\"\n"), {},
         {"test.toml:3: health.bind_address: 'localhost' is not an IP address"}},
        {"health_port_eq_bind_port", ep("[health]\nport = 7445\n"), {},
         {"test.toml:3: health.port: 7445 is also the listen port"}},
        {"bind_port_eq_health_port", ep("bind_port = 7446\n"), {},
         {"default: health.port: 7446 is also the listen port"}},
        // flags
        {"flag_unknown", kEp, {"--endpoint=10.0.0.1:1"}, {"unknown flag --endpoint (did you mean 'endpoints'?)"}},
        {"flag_bind_port_0", kEp, {"--bind-port=0"}, {"--bind-port: 0 out of range 1-65535"}},
        {"flag_bind_port_70000", kEp, {"--bind-port", "70000"}, {"--bind-port: 70000 out of range 1-65535"}},
        {"flag_bind_port_text", kEp, {"--bind-port", "abc"}, {"--bind-port: invalid value \"abc\" (want a whole number)"}},
        {"flag_bind_port_negative", kEp, {"--bind-port=-1"}, {"--bind-port: invalid value \"-1\" (want a whole number)"}},
        {"flag_bind_port_empty", kEp, {"--bind-port="}, {"--bind-port: invalid value \"\" (want a whole number)"}},
        {"flag_bind_port_huge", kEp, {"--bind-port=99999999999999999999"},
         {"--bind-port: 99999999999999999999 out of range 1-65535"}},
        {"flag_duration_unitless", kEp, {"--health-interval=5"}, {"--health-interval: missing unit in duration '5'"}},
        {"flag_duration_empty", kEp, {"--connect-timeout="}, {"--connect-timeout: empty duration"}},
        {"flag_bool_bad", kEp, {"--tcp-nodelay=maybe"}, {"--tcp-nodelay: invalid value \"maybe\" (want true or false)"}},
        {"flag_policy", kEp, {"--policy", "rr"}, {"--policy: invalid value \"rr\""}},
        {"flag_endpoint_port", "", {"--endpoints", "10.0.0.1:70000"},
         {"--endpoints: endpoints: invalid address '10.0.0.1:70000': port 70000 out of range 1-65535"}},
        {"flag_endpoint_dup", "", {"--endpoints", "10.0.0.1:1,10.0.0.1:1"},
         {"--endpoints: endpoints: duplicate endpoint '10.0.0.1:1'"}},
        {"flag_endpoints_empty", "", {"--endpoints="}, {"no endpoints configured"}},
        {"flag_non_loopback", kEp, {"--bind-address=10.0.0.1"},
         {"--bind-address: bind_address: '10.0.0.1' is not a loopback address"}},
        {"flag_timeout_ge_interval", kEp, {"--health-timeout=10s"},
         {"--health-timeout: health.timeout: 10s must be shorter than health.interval (5s)"}},
        {"flag_health_port_eq_bind", kEp, {"--health-port", "7445"},
         {"--health-port: health.port: 7445 is also the listen port"}},
        {"flag_missing_value", kEp, {"--policy"}, {"--policy: missing value"}},
        {"flag_value_is_a_flag", kEp, {"--policy", "--zone", "a"}, {"--policy: missing value before --zone"}},
        {"flag_stray_arg", kEp, {"--tcp-nodelay", "false"},
         {"unexpected argument 'false': a boolean flag takes its value after '=', as in --tcp-nodelay=false"}},
    };
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, Rejected) {
    const BadCase& c = GetParam();
    std::vector<const char*> argv{"kprism"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    CommandLine cl;
    std::vector<std::string> errors;
    bool ok = parse_command_line(static_cast<int>(argv.size()), argv.data(), cl, errors);
    if (ok) {
        Config cfg;
        ok = load_config_text(c.toml, "test.toml", cl, cfg, errors);
    }
    EXPECT_FALSE(ok) << "accepted:\n" << c.toml;
    for (const auto& w : c.want) EXPECT_ERROR(errors, w);
    // One line per error.
    for (const auto& e : errors) EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(Config, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

// Malformed table headers must be reported as "invalid TOML" like any other syntax error. Run in
// a child process: toml++ 3.3.0 hits an internal assert() on these and aborts the whole process.
TEST(ConfigDeathTest, MalformedTableHeaderIsAnErrorNotACrash) {
    for (const char* text : {"[\n", "[[[\n", "[[[a]]]\n", "[[ [a]]\n", "[=]\n", "[#]\n"}) {
        SCOPED_TRACE(text);
        EXPECT_EXIT(
            {
                CommandLine cl;
                Config c;
                std::vector<std::string> errors;
                bool ok = load_config_text(text, "test.toml", cl, c, errors);
                std::exit(!ok && any_contains(errors, "test.toml:1:") && any_contains(errors, "invalid TOML") ? 0 : 1);
            },
            ::testing::ExitedWithCode(0), "");
    }
}

// ---------------------------------------------------------------- files

TEST(ConfigFile, NonexistentPath) {
    CommandLine cl;
    cl.config_file = "/nonexistent/kprism-test/kprism.toml";
    Config c;
    std::vector<std::string> errors;
    EXPECT_FALSE(load_config(cl, c, errors));
    ASSERT_EQ(errors.size(), 1u) << joined(errors);
    EXPECT_ERROR(errors, "/nonexistent/kprism-test/kprism.toml: cannot read config file: No such file or directory");
}

// A directory is not a config file; it must not be read as an empty one (and pass validation
// when the flags alone are complete).
TEST(ConfigFile, Directory) {
    std::string dir = ::testing::TempDir();
    CommandLine cl = parse_args({"--config", dir.c_str(), "--endpoints=10.0.0.1:6443"});
    Config c;
    std::vector<std::string> errors;
    EXPECT_FALSE(load_config(cl, c, errors)) << "directory accepted as an empty config file";
    EXPECT_ERROR(errors, dir + ": cannot read config file");
}

TEST(ConfigFile, Unreadable) {
    if (geteuid() == 0) GTEST_SKIP() << "root can read mode-000 files";
    std::string path = ::testing::TempDir() + "kprism_unreadable_" + std::to_string(getpid()) + ".toml";
    { std::ofstream(path) << "endpoints = [\"10.0.0.1:6443\"]\n"; }
    chmod(path.c_str(), 0);
    CommandLine cl;
    cl.config_file = path;
    Config c;
    std::vector<std::string> errors;
    EXPECT_FALSE(load_config(cl, c, errors));
    EXPECT_ERROR(errors, path + ": cannot read config file: Permission denied");
    unlink(path.c_str());
}

TEST(ConfigFile, ReadsFileAndNamesItInErrors) {
    std::string path = ::testing::TempDir() + "kprism_config_test_" + std::to_string(getpid()) + ".toml";
    {
        std::ofstream f(path);
        f << "endpoints = [\"10.0.0.1:6443\"]\n\nbind_port = 8443\n";
    }
    CommandLine cl = parse_args({"--config", path.c_str(), "--health-port=9443"});
    Config c;
    std::vector<std::string> errors;
    EXPECT_TRUE(load_config(cl, c, errors)) << joined(errors);
    EXPECT_EQ(c.config_file, path);
    EXPECT_EQ(c.s.bind_port, 8443);
    EXPECT_EQ(c.s.health_port, 9443);
    EXPECT_EQ(c.origin.at("bind_port"), path + ":3");
    {
        std::ofstream f(path);
        f << "endpoints = [\"10.0.0.1:6443\"]\nbind_port = 0\n";
    }
    errors.clear();
    EXPECT_FALSE(load_config(cl, c, errors));
    EXPECT_ERROR(errors, path + ":2: bind_port: 0 out of range");
    unlink(path.c_str());
}

TEST(ConfigFile, NoFileUsesFlags) {
    CommandLine cl = parse_args({"--endpoints=10.0.0.1:6443"});
    Config c;
    std::vector<std::string> errors;
    EXPECT_TRUE(load_config(cl, c, errors)) << joined(errors);
    EXPECT_TRUE(c.config_file.empty());
    EXPECT_EQ(c.endpoints.size(), 1u);
    CommandLine none;
    errors.clear();
    EXPECT_FALSE(load_config(none, c, errors));
    EXPECT_ERROR(errors, "no endpoints configured");
}

// ---------------------------------------------------------------- rendering and misc

TEST(RenderConfig, EveryKeyWithOrigin) {
    Config c = load_ok(std::string(kEp) + "[health]\nport = 9001\n", {"--bind-port=9000"});
    std::string r = render_config(c);
    EXPECT_TRUE(contains(r, "effective configuration (file test.toml)")) << r;
    EXPECT_TRUE(contains(r, "endpoints = [\"10.0.0.1:6443\"]  # test.toml:1\n")) << r;
    EXPECT_TRUE(contains(r, "bind_port = 9000  # --bind-port\n")) << r;
    EXPECT_TRUE(contains(r, "bind_address = [\"127.0.0.1\"]  # default\n")) << r;
    EXPECT_TRUE(contains(r, "\n[health]\n")) << r;
    EXPECT_TRUE(contains(r, "port = 9001  # test.toml:3\n")) << r;
    EXPECT_TRUE(contains(r, "interval = \"5s\"  # default\n")) << r;
    EXPECT_TRUE(contains(r, "timeout = \"3s\"  # default\n")) << r;
    EXPECT_TRUE(contains(r, "\n[tcp]\n")) << r;
    EXPECT_TRUE(contains(r, "nodelay = true  # default\n")) << r;
    EXPECT_TRUE(contains(r, "\n[log]\n")) << r;
    EXPECT_TRUE(contains(r, "policy = \"random\"  # default\n")) << r;
    EXPECT_FALSE(contains(r, "\n[]\n")) << "top-level keys come before any section:\n" << r;
    for (const auto& o : options()) {
        std::string key = o.key;
        std::string leaf = key.substr(key.find('.') == std::string::npos ? 0 : key.find('.') + 1);
        EXPECT_TRUE(contains(r, "\n" + leaf + " = ")) << key << " missing from:\n" << r;
    }
}

TEST(RenderConfig, IsLoadableTomlThatRoundTrips) {
    Config c = load_ok(R"(endpoints = ["10.0.0.1:6443", "[fd00::1]:443", "api.example.com:6443"]
bind_address = ["127.0.0.1", "::1"]
policy = "least-connections"
connect_timeout = "1.5s"
[health]
interval = "1m30s"
timeout = "250ms"
[tcp]
nodelay = false
keepalive = "0"
)");
    std::string r = render_config(c);
    Loaded back = load(r);
    ASSERT_TRUE(back.ok) << joined(back.errors) << "\n" << r;
    EXPECT_EQ(back.cfg.s.endpoints, c.s.endpoints);
    EXPECT_EQ(back.cfg.s.bind_address, c.s.bind_address);
    EXPECT_EQ(back.cfg.s.policy, c.s.policy);
    EXPECT_EQ(back.cfg.s.connect_timeout, 1500ms);
    EXPECT_EQ(back.cfg.s.health_interval, 90s);
    EXPECT_EQ(back.cfg.s.health_timeout, 250ms);
    EXPECT_FALSE(back.cfg.s.tcp_nodelay);
    EXPECT_EQ(back.cfg.s.tcp_keepalive, 0ms);
    // Same values after a round trip (origins differ: everything now comes from the file).
    auto values = [](const std::string& text) {
        std::string out;
        size_t start = text.find('\n');
        while (start < text.size()) {
            size_t end = text.find('\n', start + 1);
            if (end == std::string::npos) end = text.size();
            std::string line = text.substr(start, end - start);
            out += line.substr(0, line.find("  # "));
            start = end;
        }
        return out;
    };
    EXPECT_EQ(values(render_config(back.cfg)), values(r));
    EXPECT_TRUE(contains(render_config(back.cfg), "bind_port = 7445  # test.toml:"));
}

TEST(RenderConfig, NoFile) {
    Config c = load_ok("", {"--endpoints=10.0.0.1:1"});
    c.config_file.clear();
    std::string r = render_config(c);
    EXPECT_FALSE(contains(r, "(file")) << r;
    EXPECT_TRUE(contains(r, "endpoints = [\"10.0.0.1:1\"]  # --endpoints\n")) << r;
}

TEST(Options, SchemaIsConsistent) {
    std::set<std::string> keys, flags;
    for (const auto& o : options()) {
        EXPECT_TRUE(keys.insert(o.key).second) << "duplicate key " << o.key;
        EXPECT_TRUE(flags.insert(o.flag).second) << "duplicate flag " << o.flag;
        EXPECT_LE(o.min, o.max) << o.key;
        EXPECT_NE(std::string(o.help), "") << o.key;
        // Every option is reachable by its flag.
        std::string arg = std::string("--") + o.flag + "=x";
        CommandLine cl = parse_args({arg.c_str()});
        ASSERT_EQ(cl.flags.size(), 1u) << arg;
        EXPECT_EQ(cl.flags[0].first, &o) << arg;
    }
    for (const char* key : {"endpoints", "bind_address", "bind_port", "allow_non_loopback", "policy", "connect_timeout",
                            "drain_timeout", "max_connections", "resolve_interval", "health.bind_address", "health.port",
                            "health.interval", "health.timeout", "tcp.nodelay", "tcp.keepalive", "tcp.keepalive_interval",
                            "tcp.keepalive_count", "tcp.user_timeout", "log.level", "log.format"})
        EXPECT_TRUE(keys.count(key)) << key;
}

TEST(Options, UsageListsEveryFlag) {
    std::string u = usage_text();
    for (const auto& o : options()) {
        EXPECT_TRUE(contains(u, std::string("--") + o.flag + " ")) << o.flag;
        EXPECT_TRUE(contains(u, std::string("[") + o.key + "]")) << o.key;
    }
    EXPECT_TRUE(contains(u, "--tcp-nodelay [=BOOL]"));
    EXPECT_TRUE(contains(u, "--config FILE"));
}

TEST(EditDistance, Values) {
    EXPECT_EQ(edit_distance("", ""), 0u);
    EXPECT_EQ(edit_distance("abc", ""), 3u);
    EXPECT_EQ(edit_distance("", "abc"), 3u);
    EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
    EXPECT_EQ(edit_distance("endpoint", "endpoints"), 1u);
    EXPECT_EQ(edit_distance("bind_prot", "bind_port"), 2u);
    EXPECT_EQ(edit_distance("same", "same"), 0u);
}

// The settings with a fixed set of values arrive as enums; every choice the schema offers maps.
TEST(Config, ChoicesAreDecidedOnceIntoEnums) {
    Config c = load_ok(kEp);
    EXPECT_EQ(c.fail_mode, FailMode::open);
    EXPECT_EQ(c.policy, PolicyKind::random);
    EXPECT_EQ(c.log_level, log::Level::info);
    EXPECT_EQ(c.log_format, log::Format::logfmt);
    c = load_ok(std::string(kEp) + "fail_mode = \"fail-closed\"\npolicy = \"latency\"\n[log]\nlevel = \"warn\"\nformat = \"json\"\n");
    EXPECT_EQ(c.fail_mode, FailMode::closed);
    EXPECT_EQ(c.policy, PolicyKind::latency);
    EXPECT_EQ(c.log_level, log::Level::warn);
    EXPECT_EQ(c.log_format, log::Format::json);
    EXPECT_EQ(load_ok(kEp, {"--policy=least-connections"}).policy, PolicyKind::least_connections);
    EXPECT_EQ(load_ok(kEp, {"--log-level=debug"}).log_level, log::Level::debug);
    EXPECT_EQ(load_ok(kEp, {"--log-level=error"}).log_level, log::Level::error);
}

// Only the admin address and discovery wait for a restart; a reload applies everything else.
TEST(Config, ReloadableColumn) {
    std::vector<std::string> restart_only;
    for (const auto& o : options())
        if (!o.reloadable) restart_only.push_back(o.key);
    EXPECT_EQ(restart_only, (std::vector<std::string>{"keep_on_crash", "discovery.enabled", "discovery.snapshot_file",
                                                      "discovery.snapshot_max_age", "discovery.allowed_cidrs",
                                                      "health.bind_address",
                                                      "health.port"}));
}

// One rule for the TLS server name: the endpoint's own, else health.server_name, else empty (the
// host, see Upstream::tls_name()).
TEST(Config, EffectiveServerName) {
    Config c = load_ok(R"(endpoints = [{ address = "10.0.0.1:6443", server_name = "api-a" }, "10.0.0.2:6443"]
)");
    ASSERT_EQ(c.endpoints.size(), 2u);
    EXPECT_EQ(c.endpoints[0].server_name, "api-a");
    EXPECT_EQ(c.endpoints[1].server_name, "");
    c = load_ok(R"(endpoints = [{ address = "10.0.0.1:6443", server_name = "api-a" }, "10.0.0.2:6443"]
[health]
server_name = "kubernetes"
)");
    EXPECT_EQ(c.endpoints[0].server_name, "api-a");
    EXPECT_EQ(c.endpoints[1].server_name, "kubernetes");
}

}  // namespace
}  // namespace kprism
