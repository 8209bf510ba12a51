// The /status document (render, then parse back as `kprism status` does), JSON quoting and
// parsing, the /readyz text and the status table.
#include <gtest/gtest.h>

#include "kprism/json.h"
#include "kprism/status.h"
#include "kprism/status_cmd.h"

using namespace kprism;

TEST(Json, QuoteEscapesAndKeepsUtf8Valid) {
    EXPECT_EQ(json_quote("plain"), "\"plain\"");
    EXPECT_EQ(json_quote("a\"b\\c"), R"("a\"b\\c")");
    EXPECT_EQ(json_quote("l1\nl2\r\t"), R"("l1\nl2\r\t")");
    EXPECT_EQ(json_quote(std::string("\x01\x1f\x7f", 3)), R"("\u0001\u001f\u007f")");
    EXPECT_EQ(json_quote("zone-\xc3\xa9"), "\"zone-\xc3\xa9\"") << "valid UTF-8 is kept";
    EXPECT_EQ(json_quote("\xe2\x82\xac\xf0\x9f\x98\x80"), "\"\xe2\x82\xac\xf0\x9f\x98\x80\"");
    EXPECT_EQ(json_quote("bad\xff" "x"), R"("bad\ufffdx")");
    EXPECT_EQ(json_quote("\xc3"), R"("\ufffd")") << "truncated sequence";
    EXPECT_EQ(json_quote("\xc0\xaf"), R"("\ufffd\ufffd")") << "overlong";
    EXPECT_EQ(json_quote("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")") << "surrogate";
}

TEST(Json, ParsesWhatItQuotes) {
    for (std::string s : {std::string("x\"y\\z\n\t"), std::string("\x01\x7f", 2), std::string("\xc3\xa9\xf0\x9f\x98\x80")}) {
        auto v = parse_json(json_quote(s));
        ASSERT_TRUE(v);
        EXPECT_EQ(v->string, s);
    }
}

TEST(Json, Values) {
    std::string err;
    auto v = parse_json(R"( {"a": [1, -2.5e3, 0, true, false, null], "b": {"c": "\u00e9\ud83d\ude00\/"}, "": 0.25} )", &err);
    ASSERT_TRUE(v) << err;
    const JsonValue* a = v->get("a");
    ASSERT_TRUE(a && a->type == JsonValue::Type::array && a->array.size() == 6);
    EXPECT_EQ(a->array[0].number, 1);
    EXPECT_EQ(a->array[1].number, -2500);
    EXPECT_TRUE(a->array[3].boolean);
    EXPECT_FALSE(a->array[4].boolean);
    EXPECT_TRUE(a->array[5].is_null());
    EXPECT_EQ(v->get("b")->get("c")->string, "\xc3\xa9\xf0\x9f\x98\x80/");
    EXPECT_EQ(v->get("")->number, 0.25);
    EXPECT_EQ(v->get("zz"), nullptr);
    EXPECT_EQ(a->get("x"), nullptr);
}

TEST(Json, RejectsMalformed) {
    for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "{\"a\":1,}", "01", "1.", "-", "+1", ".5", "1e", "tru",
                            "nul", "\"abc", "\"a\x01\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
                            "{} x", "[1] [2]", "'a'", "\"\xff\"", "{1:2}"}) {
        std::string err;
        EXPECT_FALSE(parse_json(bad, &err)) << bad;
        EXPECT_FALSE(err.empty()) << bad;
    }
    std::string deep(kMaxJsonDepth + 2, '[');
    deep += std::string(kMaxJsonDepth + 2, ']');
    EXPECT_FALSE(parse_json(deep));
    std::string ok(kMaxJsonDepth, '[');
    ok += std::string(kMaxJsonDepth, ']');
    EXPECT_TRUE(parse_json(ok));
}

namespace {

struct Fixture {
    Upstream a, b, c;
    Snapshot s;
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
        b.last_change_unix = 1500;
        c.name = "[fd00::3]:6443";
        s.version = "0.9.0";
        s.connections_active = 17;
        s.upstreams = {&a, &b, &c};
    }
};

}  // namespace

TEST(Status, JsonRoundTrip) {
    Fixture f;
    std::string json = render_status_json(f.s);
    ASSERT_TRUE(parse_json(json)) << json;
    StatusDoc d;
    std::string err;
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
    EXPECT_EQ(d.upstreams[2].state, "unknown");
    EXPECT_EQ(d.upstreams[2].last_result, "") << "null";
    EXPECT_LT(d.upstreams[2].rtt_ms, 0) << "null";
    EXPECT_EQ(d.upstreams[2].last_change_unix, 0) << "null";
    EXPECT_NE(json.find(R"("last_result":null)"), std::string::npos);
    EXPECT_NE(json.find(R"("rtt_ms":null)"), std::string::npos);
    EXPECT_NE(json.find(R"("last_change_unix":null)"), std::string::npos);
}

TEST(Status, NotReadyWhenNoneUpOrDraining) {
    Fixture f;
    f.a.health = Health::down;
    EXPECT_FALSE(snapshot_ready(f.s));
    EXPECT_NE(render_status_json(f.s).find(R"("ready":false)"), std::string::npos);
    f.a.health = Health::up;
    f.s.draining = true;
    EXPECT_FALSE(snapshot_ready(f.s));
    EXPECT_EQ(render_readyz(f.s, false), "not ready: shutting down\n");
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
              "UPSTREAM        ZONE    STATE    LAST RESULT  RTT    CONNS  SINCE  ERROR\n"
              "10.0.0.1:6443   zone-a  up       ready        1.4ms  17     3m12s\n"
              "10.0.0.2:6443   -       down     not_ready    -      0      0s     HTTP 500: [-]etcd \"failed\"\n"
              "[fd00::3]:6443  -       unknown  -            -      0      -\n");
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
