// SPDX-License-Identifier: Apache-2.0
// The /status document (render, then parse back as `kprism status` does), the JSON bounds around
// nlohmann-json (json.h), the /readyz text, the status table and its ERROR cell.
#include <gtest/gtest.h>

#include "kprism/base/json.h"
#include "kprism/admin/status.h"
#include "kprism/cli/status_cmd.h"

using namespace kprism;

std::string dumped(const std::string& s) { return json_dump(Json(s)); }

TEST(Json, DumpEscapesAndKeepsUtf8Valid) {
    EXPECT_EQ(dumped("plain"), "\"plain\"");
    EXPECT_EQ(dumped("a\"b\\c"), R"("a\"b\\c")");
    EXPECT_EQ(dumped("l1\nl2\r\t"), R"("l1\nl2\r\t")");
    EXPECT_EQ(dumped(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
    EXPECT_EQ(dumped("\x7f"), "\"\x7f\"") << "DEL is valid in a JSON string";
    EXPECT_EQ(dumped("zone-\xc3\xa9"), "\"zone-\xc3\xa9\"") << "valid UTF-8 is kept";
    EXPECT_EQ(dumped("\xe2\x82\xac\xf0\x9f\x98\x80"), "\"\xe2\x82\xac\xf0\x9f\x98\x80\"");
}

// Invalid UTF-8 (an upstream's bytes in an error message) comes out as U+FFFD, never raw.
TEST(Json, DumpReplacesInvalidUtf8) {
    const std::string fffd = "\xef\xbf\xbd";
    EXPECT_EQ(dumped("bad\xff" "x"), "\"bad" + fffd + "x\"");
    EXPECT_EQ(dumped("\xc3"), "\"" + fffd + "\"") << "truncated sequence";
    EXPECT_EQ(dumped("\xc0\xaf"), "\"" + fffd + fffd + "\"") << "overlong";
    EXPECT_EQ(dumped("\xed\xa0\x80"), "\"" + fffd + fffd + fffd + "\"") << "surrogate";
    // Whatever goes in, the document parses again (nlohmann rejects invalid UTF-8 when parsing).
    Json back;
    std::string err;
    ASSERT_TRUE(parse_json(json_dump(Json{{"e", "x\xff\xfe\xc3(\xed\xa0\x80"}}), back, err)) << err;
    EXPECT_EQ(back["e"].get<std::string>(), "x" + fffd + fffd + fffd + "(" + fffd + fffd + fffd);
}

TEST(Json, ParsesWhatItDumps) {
    for (std::string s : {std::string("x\"y\\z\n\t"), std::string("\x01\x7f", 2), std::string("\xc3\xa9\xf0\x9f\x98\x80")}) {
        Json v;
        std::string err;
        ASSERT_TRUE(parse_json(dumped(s), v, err)) << err;
        EXPECT_EQ(v.get<std::string>(), s);
    }
}

TEST(Json, Values) {
    std::string err;
    Json v;
    ASSERT_TRUE(parse_json(R"( {"a": [1, -2.5e3, 0, true, false, null], "b": {"c": "\u00e9\ud83d\ude00\/"}, "": 0.25} )", v, err)) << err;
    const Json& a = v["a"];
    ASSERT_TRUE(a.is_array() && a.size() == 6);
    EXPECT_EQ(a[0].get<double>(), 1);
    EXPECT_EQ(a[1].get<double>(), -2500);
    EXPECT_TRUE(a[3].get<bool>());
    EXPECT_FALSE(a[4].get<bool>());
    EXPECT_TRUE(a[5].is_null());
    EXPECT_EQ(v["b"]["c"].get<std::string>(), "\xc3\xa9\xf0\x9f\x98\x80/");
    EXPECT_EQ(v[""].get<double>(), 0.25);
    EXPECT_FALSE(v.contains("zz"));
}

TEST(Json, RejectsMalformed) {
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "{\"a\":1,}", "01", "1.", "-", "+1", ".5", "1e", "tru",
                            "nul", "\"abc", "\"a\x01\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
                            "{} x", "[1] [2]", "'a'", "\"\xff\"", "{1:2}"}) {
        std::string err;
        Json v;
        EXPECT_FALSE(parse_json(bad, v, err)) << bad;
        EXPECT_FALSE(err.empty()) << bad;
        EXPECT_EQ(err.find("[json.exception"), std::string::npos) << err;
    }
}

TEST(Json, DepthIsBounded) {
    Json v;
    std::string err;
    std::string deep(kMaxJsonDepth + 1, '[');
    deep += std::string(kMaxJsonDepth + 1, ']');
    EXPECT_FALSE(parse_json(deep, v, err));
    EXPECT_EQ(err, "nested deeper than 32");
    std::string deep_obj;
    for (int i = 0; i <= kMaxJsonDepth; ++i) deep_obj += "{\"a\":";
    deep_obj += "1" + std::string(kMaxJsonDepth + 1, '}');
    EXPECT_FALSE(parse_json(deep_obj, v, err));
    // A hostile document far deeper still fails cleanly (and fast).
    std::string hostile(1000000, '[');
    EXPECT_FALSE(parse_json(hostile, v, err));
    std::string ok(kMaxJsonDepth, '[');
    ok += std::string(kMaxJsonDepth, ']');
    EXPECT_TRUE(parse_json(ok, v, err)) << err;
}

TEST(Json, SizeIsBoundedBeforeParsing) {
    Json v;
    std::string err;
    std::string big = "\"" + std::string(kMaxJsonBytes - 2, 'a') + "\"";
    ASSERT_EQ(big.size(), kMaxJsonBytes);
    EXPECT_TRUE(parse_json(big, v, err)) << err;
    big.insert(1, "a");
    EXPECT_FALSE(parse_json(big, v, err));
    EXPECT_EQ(err.rfind("document too large", 0), 0u) << err;
    // Checked before parsing: an oversize document is refused even if it is not JSON at all.
    err.clear();
    EXPECT_FALSE(parse_json(std::string(kMaxJsonBytes + 1, '!'), v, err));
    EXPECT_EQ(err.rfind("document too large", 0), 0u) << err;
    StatusDoc d;
    err.clear();
    EXPECT_FALSE(parse_status_json(std::string(kMaxJsonBytes + 1, ' '), d, err));
    EXPECT_EQ(err.rfind("document too large", 0), 0u) << err;
}

namespace {

struct Fixture {
    Upstream a, b, c;
    StateView s;
    Fixture() {
        a.name = "10.0.0.1:6443";
        a.zone = "zone-a";
        a.health = Health::up;
        a.has_result = true;
        a.last_result = CheckResult::ready;
        a.last_change_unix = 1000;
        a.rtt_ms = 1.4375;
        a.active = 17;
        b.name = "10.0.0.2:6443";
        b.health = Health::down;
        b.has_result = true;
        b.last_result = CheckResult::not_ready;
        b.last_error = "HTTP 500: [-]etcd \"failed\"\n";
        b.failing_checks.names = {"etcd"};
        b.down_reason = DownReason::etcd;
        b.last_change_unix = 1500;
        b.source = Source::discovered;
        c.name = "[fd00::3]:6443";
        c.source = Source::snapshot;
        s.version = "0.9.0";
        s.pid = 4242;
        s.connections_active = 17;
        s.client_cert = "/var/lib/kubelet/pki/kubelet-client-current.pem";
        s.client_cert_subject = "/O=system:nodes/CN=system:node:n1";
        s.client_cert_not_after = 1192 + 30 * 86400;
        s.now_unix = 1192;
        s.credentials = "ok";
        s.upstreams = {&a, &b, &c};
    }
};

}  // namespace

TEST(Status, JsonRoundTrip) {
    Fixture f;
    std::string json = render_status_json(f.s);
    Json raw;
    std::string err;
    ASSERT_TRUE(parse_json(json, raw, err)) << err << "\n" << json;
    EXPECT_EQ(json.back(), '\n');
    StatusDoc d;
    ASSERT_TRUE(parse_status_json(json, d, err)) << err << "\n" << json;
    EXPECT_EQ(d.version, "0.9.0");
    EXPECT_TRUE(d.ready);
    EXPECT_FALSE(d.fail_open);
    EXPECT_EQ(d.connections_active, 17u);
    ASSERT_EQ(d.upstreams.size(), 3u);
    EXPECT_EQ(d.upstreams[0].address, "10.0.0.1:6443");
    EXPECT_EQ(d.upstreams[0].zone, "zone-a");
    EXPECT_EQ(d.upstreams[0].state, "up");
    EXPECT_EQ(d.upstreams[0].last_result, "ready");
    EXPECT_NEAR(d.upstreams[0].rtt_ms, 1.438, 0.001);
    EXPECT_EQ(d.upstreams[0].active_connections, 17u);
    EXPECT_EQ(d.upstreams[0].last_change_unix, 1000);
    EXPECT_EQ(d.upstreams[1].last_error, "HTTP 500: [-]etcd \"failed\"\n");
    EXPECT_EQ(d.upstreams[1].failing_checks.names, (std::vector<std::string>{"etcd"}));
    EXPECT_EQ(d.upstreams[1].down_reason, "etcd");
    EXPECT_EQ(d.upstreams[0].down_reason, "") << "null: not down";
    EXPECT_NE(json.find(R"("failing_checks":["etcd"],"failing_checks_more":0,"down_reason":"etcd")"), std::string::npos)
        << json;
    EXPECT_EQ(d.upstreams[0].source, "static");
    EXPECT_EQ(d.upstreams[1].source, "discovered");
    EXPECT_EQ(d.upstreams[2].source, "snapshot");
    EXPECT_FALSE(d.discovery.enabled);
    EXPECT_NE(json.find(R"("discovery":{"enabled":false,"state":"off","via":null,"resource_version":null,"endpoints":0,)"),
              std::string::npos)
        << json;
    EXPECT_NE(json.find(R"("snapshot":{"path":"","state":"disabled","detail":"","written_unix":null,"age_seconds":null}})"),
              std::string::npos)
        << json;
    EXPECT_EQ(d.upstreams[2].state, "unknown");
    EXPECT_EQ(d.upstreams[2].last_result, "") << "null";
    EXPECT_LT(d.upstreams[2].rtt_ms, 0) << "null";
    EXPECT_EQ(d.upstreams[2].last_change_unix, 0) << "null";
    EXPECT_NE(json.find(R"("last_result":null)"), std::string::npos);
    EXPECT_NE(json.find(R"("rtt_ms":null)"), std::string::npos);
    EXPECT_NE(json.find(R"("last_change_unix":null)"), std::string::npos);
    EXPECT_NE(json.find(R"("rtt_ms":1.438,)"), std::string::npos) << "to the microsecond: " << json;
    // Members in document order, as before nlohmann.
    EXPECT_EQ(json.rfind(R"({"version":"0.9.0","pid":4242,"ready":true,"fail_open":false,"draining":false,)", 0), 0u)
        << json;
    EXPECT_NE(json.find(R"({"address":"10.0.0.1:6443","zone":"zone-a","source":"static","state":"up","last_result":"ready",)"),
              std::string::npos)
        << json;
    EXPECT_EQ(d.pid, 4242);
    ASSERT_TRUE(d.has_reload);
    EXPECT_EQ(d.reload.generation, 0u);
    EXPECT_EQ(d.reload.last_result, "") << "null before the first reload";
    EXPECT_EQ(d.reload.last_unix, 0);
    EXPECT_NE(json.find(R"("reload":{"generation":0,"ok":0,"failed":0,"last_result":null,"last_error":"","last_changes":"","last_unix":null})"),
              std::string::npos)
        << json;
    // Typed as JSON: numbers are numbers, booleans booleans.
    EXPECT_TRUE(raw["pid"].is_number_integer());
    EXPECT_TRUE(raw["connections_active"].is_number_unsigned());
    EXPECT_TRUE(raw["upstreams"][0]["active_connections"].is_number_unsigned());
    EXPECT_TRUE(raw["ready"].is_boolean());
}

TEST(Status, ReloadOutcomeRoundTrip) {
    Fixture f;
    f.s.stats.reloads_ok = 2;
    f.s.stats.reloads_failed = 1;
    f.s.stats.reload_generation = 3;
    f.s.stats.reload_last_ok = false;
    f.s.stats.reload_last_error = "kprism.toml:3: invalid TOML: expected ']'; --bind-port: bad";
    f.s.stats.reload_last_unix = 1700000000;
    StatusDoc d;
    std::string err;
    ASSERT_TRUE(parse_status_json(render_status_json(f.s), d, err)) << err;
    ASSERT_TRUE(d.has_reload);
    EXPECT_EQ(d.reload.generation, 3u);
    EXPECT_EQ(d.reload.ok, 2u);
    EXPECT_EQ(d.reload.failed, 1u);
    EXPECT_EQ(d.reload.last_result, "failed");
    EXPECT_EQ(d.reload.last_error, "kprism.toml:3: invalid TOML: expected ']'; --bind-port: bad");
    EXPECT_EQ(d.reload.last_unix, 1700000000);
    f.s.stats.reload_last_ok = true;
    f.s.stats.reload_last_error.clear();
    f.s.stats.reload_last_changes = "endpoint_added=10.0.0.9:6443";
    ASSERT_TRUE(parse_status_json(render_status_json(f.s), d, err)) << err;
    EXPECT_EQ(d.reload.last_result, "ok");
    EXPECT_EQ(d.reload.last_changes, "endpoint_added=10.0.0.9:6443");
    // A kprism from before pid and reload were reported: still a valid status document.
    ASSERT_TRUE(parse_status_json(R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[]})", d, err)) << err;
    EXPECT_EQ(d.pid, 0);
    EXPECT_FALSE(d.has_reload);
    err.clear();
    EXPECT_FALSE(parse_status_json(R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[],"reload":{"generation":"1"}})", d, err));
    EXPECT_NE(err.find("generation"), std::string::npos) << err;
}

// An upstream's error with bytes that are not UTF-8 (a hostile or broken apiserver's body): /status
// stays valid JSON, the bytes come back as U+FFFD.
TEST(Status, InvalidUtf8InAnErrorBecomesReplacementCharacters) {
    Fixture f;
    f.b.last_error = "HTTP 500: caf\xe9 \xff\xfe";
    std::string json = render_status_json(f.s);
    StatusDoc d;
    std::string err;
    ASSERT_TRUE(parse_status_json(json, d, err)) << err << "\n" << json;
    EXPECT_EQ(d.upstreams[1].last_error, "HTTP 500: caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd");
    EXPECT_EQ(json.find('\xff'), std::string::npos);
}

TEST(Status, NotReadyWhenNoneUpOrDraining) {
    Fixture f;
    f.a.health = Health::down;
    EXPECT_FALSE(state_ready(f.s));
    EXPECT_NE(render_status_json(f.s).find(R"("ready":false)"), std::string::npos);
    f.a.health = Health::up;
    f.s.draining = true;
    EXPECT_FALSE(state_ready(f.s));
    EXPECT_EQ(render_readyz(f.s, false), "not ready: shutting down\n");
}

TEST(Status, CredentialsRoundTrip) {
    Fixture f;
    f.s.credentials = "rejected";
    f.s.client_cert_not_after = 1000;  // expired 192 s before now_unix
    StatusDoc d;
    std::string err;
    std::string json = render_status_json(f.s);
    ASSERT_TRUE(parse_status_json(json, d, err)) << err;
    ASSERT_TRUE(d.has_credentials);
    EXPECT_EQ(d.credentials.state, "rejected");
    EXPECT_EQ(d.credentials.client_cert, "/var/lib/kubelet/pki/kubelet-client-current.pem");
    EXPECT_EQ(d.credentials.subject, "/O=system:nodes/CN=system:node:n1");
    EXPECT_EQ(d.credentials.not_after_unix, 1000);
    ASSERT_TRUE(d.credentials.has_remaining);
    EXPECT_EQ(d.credentials.remaining_seconds, -192);
    EXPECT_EQ(render_credentials_line(d.credentials, false),
              "client certificate /O=system:nodes/CN=system:node:n1: rejected by every apiserver, expired 3m ago "
              "(1970-01-01T00:16:40Z)\n");
    EXPECT_NE(render_credentials_line(d.credentials, true).find("\x1b[31mrejected by every apiserver\x1b[0m"),
              std::string::npos);
    // No certificate loaded (kubelet TLS bootstrap): nulls.
    f.s.client_cert_not_after = 0;
    f.s.client_cert_subject.clear();
    f.s.credentials = "unknown";
    json = render_status_json(f.s);
    EXPECT_NE(json.find(R"("credentials":{"state":"unknown","client_cert":"/var/lib/kubelet/pki/kubelet-client-current.pem","subject":null,"not_after_unix":null,"remaining_seconds":null})"),
              std::string::npos)
        << json;
    ASSERT_TRUE(parse_status_json(json, d, err)) << err;
    EXPECT_FALSE(d.credentials.has_remaining);
    EXPECT_EQ(render_credentials_line(d.credentials, false),
              "client certificate: none loaded (/var/lib/kubelet/pki/kubelet-client-current.pem)\n");
}

// Another kprism's (or a hostile) document: wrong types are refused, strings bounded, numbers
// clamped, control characters never reach the terminal.
TEST(Status, CredentialsBadForms) {
    const std::string head = R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[],"credentials":)";
    StatusDoc d;
    std::string err;
    for (const char* bad : {R"("rejected")", R"([])", R"({"state":1,"client_cert":"","subject":null,"not_after_unix":null,"remaining_seconds":null})",
                            R"({"state":"ok","subject":null,"not_after_unix":null,"remaining_seconds":null})",
                            R"({"state":"ok","client_cert":"","subject":7,"not_after_unix":null,"remaining_seconds":null})",
                            R"({"state":"ok","client_cert":"","subject":null,"not_after_unix":"soon","remaining_seconds":null})",
                            R"({"state":"ok","client_cert":"","subject":null,"not_after_unix":null})"}) {
        err.clear();
        EXPECT_FALSE(parse_status_json(head + bad + "}", d, err)) << bad;
        EXPECT_FALSE(err.empty()) << bad;
    }
    // Absent (a kprism from before): fine, and no line for it.
    ASSERT_TRUE(parse_status_json(R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[]})", d, err)) << err;
    EXPECT_FALSE(d.has_credentials);
    EXPECT_EQ(render_status_table(d, 0, false).find("client certificate"), std::string::npos);
    // Oversized strings are cut (never inside a UTF-8 sequence), huge numbers clamped.
    std::string huge = "\xc3\xa9" + std::string(kMaxStatusCredentialsString, 'x');
    std::string subject = "a\\u001b[31m\\nb" + std::string(2000, 's');
    ASSERT_TRUE(parse_status_json(head + R"({"state":")" + huge + R"(","client_cert":"c","subject":")" + subject +
                                      R"(","not_after_unix":1e300,"remaining_seconds":-1e300}})",
                                  d, err))
        << err;
    EXPECT_LE(d.credentials.state.size(), kMaxStatusCredentialsString);
    EXPECT_EQ(d.credentials.state.rfind("\xc3\xa9x", 0), 0u);
    EXPECT_LE(d.credentials.subject.size(), kMaxStatusCredentialsString);
    EXPECT_EQ(d.credentials.not_after_unix, INT64_MAX);
    EXPECT_EQ(d.credentials.remaining_seconds, INT64_MIN);
    std::string line = render_credentials_line(d.credentials, false);
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
    EXPECT_LT(line.size(), 300u) << line;
}

TEST(Status, ParseRejectsWrongShapes) {
    StatusDoc d;
    std::string err;
    EXPECT_FALSE(parse_status_json("[]", d, err));
    err.clear();
    EXPECT_FALSE(parse_status_json(R"({"version":"x","ready":"yes","fail_open":false,"connections_active":0,"upstreams":[]})", d, err));
    EXPECT_NE(err.find("ready"), std::string::npos) << err;
    err.clear();
    EXPECT_FALSE(parse_status_json(R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[{"address":"a"}]})", d, err));
    err.clear();
    EXPECT_TRUE(parse_status_json(R"({"version":"x","ready":true,"fail_open":false,"connections_active":0,"upstreams":[],"new_member":[1]})", d, err)) << err;
}

TEST(Status, Readyz) {
    Fixture f;
    EXPECT_EQ(render_readyz(f.s, false), "ok\n");
    EXPECT_EQ(render_readyz(f.s, true),
              "[+]10.0.0.1:6443 up\n"
              "[-]10.0.0.2:6443 down: not_ready: HTTP 500: [-]etcd \"failed\" \n"
              "[-][fd00::3]:6443 unknown\n"
              "ok\n");
    f.a.health = Health::down;
    f.a.last_result = CheckResult::timeout;
    f.a.last_error = "";
    std::string v = render_readyz(f.s, true);
    EXPECT_NE(v.find("[-]10.0.0.1:6443 down: timeout\n"), std::string::npos) << v;
    EXPECT_NE(v.find("not ready: no upstream is up\n"), std::string::npos) << v;
}

TEST(Status, Table) {
    Fixture f;
    StatusDoc d;
    std::string err;
    ASSERT_TRUE(parse_status_json(render_status_json(f.s), d, err)) << err;
    std::string t = render_status_table(d, 1192, false);
    EXPECT_EQ(t,
              "kprism 0.9.0: 1 of 3 upstreams up, 17 connections\n"
              "client certificate /O=system:nodes/CN=system:node:n1: expires in 30d (1970-01-31T00:19:52Z)\n"
              "UPSTREAM        ZONE    SOURCE      STATE    LAST RESULT  CHECKS  RTT    CONNS  SINCE  ERROR\n"
              "10.0.0.1:6443   zone-a  static      up       ready        -       1.4ms  17     3m12s\n"
              "10.0.0.2:6443   -       discovered  down     not_ready    etcd    -      0      0s     HTTP 500: [-]etcd \"failed\"\n"
              "[fd00::3]:6443  -       snapshot    unknown  -            -       -      0      -\n");
    std::string colored = render_status_table(d, 1192, true);
    EXPECT_NE(colored.find("\x1b[32mup\x1b[0m       ready"), std::string::npos) << colored;
    EXPECT_NE(colored.find("\x1b[31mdown\x1b[0m"), std::string::npos);
    EXPECT_NE(colored.find("\x1b[33munknown\x1b[0m"), std::string::npos);
    EXPECT_EQ(t.find('\x1b'), std::string::npos);
}

TEST(Status, CommandLineNeedsNoEndpoints) {
    const char* argv[] = {"kprism", "status", "--health-port", "17999"};
    CommandLine cl;
    std::vector<std::string> errors;
    ASSERT_TRUE(parse_command_line(4, argv, cl, errors));
    EXPECT_EQ(cl.command, Command::status);
    Config cfg;
    EXPECT_TRUE(load_config(cl, cfg, errors)) << (errors.empty() ? "" : errors[0]);
    EXPECT_EQ(cfg.s.health_port, 17999);
    // The same flags for `run` are invalid: no endpoints.
    CommandLine run_cl = cl;
    run_cl.command = Command::run;
    Config run_cfg;
    EXPECT_FALSE(load_config(run_cl, run_cfg, errors));
    // Bad values are still errors for status.
    const char* bad[] = {"kprism", "status", "--health-port", "0"};
    CommandLine bad_cl;
    errors.clear();
    ASSERT_TRUE(parse_command_line(4, bad, bad_cl, errors));
    Config bad_cfg;
    EXPECT_FALSE(load_config(bad_cl, bad_cfg, errors));
}

// A TLS front end (or any web server) answering the probe with its HTML error page: the ERROR
// column gets one short line of its text, not the page.
TEST(Status, TableCutsAnHtmlErrorPage) {
    Fixture f;
    f.b.last_result = CheckResult::not_ready;
    f.b.last_error =
        "HTTP 400: <html>  <head><title>400 The plain HTTP request was sent to HTTPS port</title></head>  <body>  "
        "<center><h1>400 Bad Request</h1></center>  <center>The plain HTTP request was sent to HTTPS port</center>  "
        "<hr><center>nginx</center>  </body>  </html>";
    StatusDoc d;
    std::string err;
    ASSERT_TRUE(parse_status_json(render_status_json(f.s), d, err)) << err;
    EXPECT_EQ(d.upstreams[1].last_error, f.b.last_error) << "/status keeps the full text";
    std::string t = render_status_table(d, 1600, false);
    size_t at = t.find("\n10.0.0.2:6443 ");
    ASSERT_NE(at, std::string::npos) << t;
    std::string row = t.substr(at + 1, t.find('\n', at + 1) - at - 1);
    std::string cell = row.substr(row.find("HTTP 400"));
    EXPECT_EQ(cell, "HTTP 400: 400 The plain HTTP request was sent to HTTPS port...") << t;
    EXPECT_LE(cell.size(), kErrorCellMax);
    EXPECT_EQ(row.find('<'), std::string::npos) << row;
    for (const auto& line : {row}) EXPECT_LT(line.size(), 150u) << line;
}

TEST(Status, ErrorCell) {
    EXPECT_EQ(error_cell("connect_failed: connection refused"), "connect_failed: connection refused");
    EXPECT_EQ(error_cell(""), "");
    EXPECT_EQ(error_cell("  a \t\r\n b\x01\x7f" "c  "), "a b c") << "white space and controls collapse";
    EXPECT_EQ(error_cell("expected <= 3 and > 1"), "expected <= 3 and > 1") << "not HTML: kept";
    EXPECT_EQ(error_cell("<!DOCTYPE html><HTML><BODY>Forbidden</BODY></HTML>"), "Forbidden");
    std::string long_text(200, 'x');
    EXPECT_EQ(error_cell(long_text), std::string(kErrorCellMax - 3, 'x') + "...");
    EXPECT_EQ(error_cell(std::string(kErrorCellMax, 'y')), std::string(kErrorCellMax, 'y')) << "fits: not cut";
    EXPECT_EQ(error_cell("abcdef ghij", 8), "abcde...");
    EXPECT_EQ(error_cell("abcd efgh", 8), "abcd...") << "no space before the ellipsis";
    // Cut by characters, never inside a UTF-8 sequence.
    std::string e;
    for (int i = 0; i < 100; ++i) e += "\xc3\xa9";
    std::string cut = error_cell(e, 10);
    EXPECT_EQ(cut, std::string("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9") + "...");
}

// Text from the admin port reaches the terminal as one printable line: C0 and C1 controls, DEL,
// the bidirectional overrides and the line separators are blanks, bytes that are not UTF-8 '?'.
TEST(Status, TerminalCell) {
    EXPECT_EQ(terminal_cell("\x1b]0;title\x07ok", 64), "]0;title ok");
    EXPECT_EQ(terminal_cell("a\xc2\x9b" "31mb", 64), "a 31mb") << "U+009B, CSI as one character";
    EXPECT_EQ(terminal_cell("a\x9b" "b\xff\xc3", 64), "a?b??") << "not UTF-8";
    EXPECT_EQ(terminal_cell("\xe2\x80\xae" "evil\xe2\x80\xa8row\xe2\x81\xa6x", 64), "evil row x");
    EXPECT_EQ(terminal_cell("\xc0\xaf\xed\xa0\x80", 64), "?????") << "overlong and surrogate";
    EXPECT_EQ(terminal_cell("z\xc3\xa9 \xf0\x9f\x98\x80", 64), "z\xc3\xa9 \xf0\x9f\x98\x80") << "printable UTF-8 kept";
    EXPECT_EQ(terminal_cell("<b>not html</b>", 64), "<b>not html</b>") << "tags are kept: only error_cell drops them";
    EXPECT_EQ(terminal_cell(std::string(100, 'a'), 10), "aaaaaaa...");
}

// Every string of a /status document, hostile, in the table: no byte a terminal acts on, and
// one line per upstream.
TEST(Status, TableOfHostileStringsStaysATable) {
    const std::string bad = "a\x1b[2J\xc2\x9b\r\n127.0.0.1:1  up\n\xe2\x80\xae";
    StatusDoc d;
    d.version = bad;
    for (int i = 0; i < 2; ++i) {
        StatusUpstream u;
        u.address = u.zone = u.source = u.state = u.last_result = u.last_error = bad;
        u.failing_checks.names = {bad};
        d.upstreams.push_back(u);
    }
    std::string t = render_status_table(d, 1, false);
    EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 4) << t;
    for (size_t i = 0; i < t.size(); ++i) {
        auto c = static_cast<unsigned char>(t[i]);
        EXPECT_FALSE((c < 0x20 && c != '\n') || c == 0x7f) << i << "\n" << t;
        EXPECT_FALSE(c == 0xc2 && i + 1 < t.size() && static_cast<unsigned char>(t[i + 1]) <= 0x9f) << i << "\n" << t;
        EXPECT_FALSE(c == 0xe2 && t.compare(i, 3, "\xe2\x80\xae") == 0) << i << "\n" << t;
    }
}

TEST(Status, ReloadCommandLine) {
    const char* argv[] = {"kprism", "reload", "--config", "/etc/kprism/kprism.toml", "--pid", "1119", "--timeout", "5s"};
    CommandLine cl;
    std::vector<std::string> errors;
    ASSERT_TRUE(parse_command_line(8, argv, cl, errors)) << errors[0];
    EXPECT_EQ(cl.command, Command::reload);
    EXPECT_EQ(cl.reload_pid, 1119);
    EXPECT_EQ(cl.reload_timeout.count(), 5000);
    EXPECT_EQ(cl.config_file, "/etc/kprism/kprism.toml");
    // Like status, reload needs no endpoints: the daemon judges the file.
    const char* flags[] = {"kprism", "--health-port=17998", "reload"};
    CommandLine fl;
    ASSERT_TRUE(parse_command_line(3, flags, fl, errors));
    EXPECT_EQ(fl.command, Command::reload);
    EXPECT_EQ(fl.reload_pid, 0);
    EXPECT_EQ(fl.reload_timeout.count(), 30000);
    Config cfg;
    EXPECT_TRUE(load_config(fl, cfg, errors)) << (errors.empty() ? "" : errors[0]);
    EXPECT_EQ(cfg.s.health_port, 17998);
    for (auto bad : std::vector<std::vector<const char*>>{{"kprism", "reload", "--pid", "0"},
                                                          {"kprism", "reload", "--pid", "12x"},
                                                          {"kprism", "reload", "--pid", "-1"},
                                                          {"kprism", "reload", "--pid"},
                                                          {"kprism", "reload", "--timeout", "0s"},
                                                          {"kprism", "reload", "--timeout", "soon"},
                                                          {"kprism", "status", "--pid", "5"},
                                                          {"kprism", "--timeout=1s", "--endpoints", "10.0.0.1:6443"}}) {
        CommandLine b;
        errors.clear();
        EXPECT_FALSE(parse_command_line(static_cast<int>(bad.size()), bad.data(), b, errors)) << bad[2];
        EXPECT_FALSE(errors.empty());
    }
    CommandLine st;
    errors.clear();
    const char* status_pid[] = {"kprism", "status", "--pid", "5"};
    EXPECT_FALSE(parse_command_line(4, status_pid, st, errors));
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0], "--pid: only 'kprism reload' takes it");
    EXPECT_NE(usage_text().find("kprism reload [--config FILE] [flags] [--pid PID] [--timeout DURATION]"),
              std::string::npos);
}
