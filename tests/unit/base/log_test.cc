// SPDX-License-Identifier: Apache-2.0
// Structured log line rendering: logfmt and JSON escaping, level parsing (kprism/base/log.h).
#include "kprism/base/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <string>
#include <utility>

namespace kprism::log {
namespace {

// "2024-01-02T03:04:05.678Z"
bool is_timestamp(std::string_view t) {
    static constexpr std::string_view shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (t.size() != shape.size()) return false;
    for (size_t i = 0; i < t.size(); ++i)
        if (shape[i] == 'd' ? !(t[i] >= '0' && t[i] <= '9') : t[i] != shape[i]) return false;
    return true;
}

// A JSON string starting at s[i]; advances i past it. Only the escapes JSON allows.
bool json_string(std::string_view s, size_t& i) {
    if (i >= s.size() || s[i] != '"') return false;
    for (++i; i < s.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '"') {
            ++i;
            return true;
        }
        if (c < 0x20) return false;
        if (c != '\\') continue;
        if (++i >= s.size()) return false;
        if (s[i] == 'u') {
            if (i + 4 >= s.size()) return false;
            for (int k = 1; k <= 4; ++k)
                if (!std::isxdigit(static_cast<unsigned char>(s[i + k]))) return false;
            i += 4;
        } else if (std::string_view("\"\\/bfnrt").find(s[i]) == std::string_view::npos) {
            return false;
        }
    }
    return false;
}

// A flat JSON object whose members are all strings: {"k":"v",...}.
bool flat_json_object(std::string_view s) {
    size_t i = 0;
    if (s.empty() || s[i++] != '{') return false;
    if (i < s.size() && s[i] == '}') return i + 1 == s.size();
    while (true) {
        if (!json_string(s, i)) return false;
        if (i >= s.size() || s[i++] != ':') return false;
        if (!json_string(s, i)) return false;
        if (i >= s.size()) return false;
        char c = s[i++];
        if (c == '}') return i == s.size();
        if (c != ',') return false;
    }
}

// Restores the process-wide log settings after each test.
class LogTest : public ::testing::Test {
protected:
    void SetUp() override {
        set_level(Level::info);
        set_format(Format::logfmt);
    }
    void TearDown() override {
        set_level(Level::info);
        set_format(Format::logfmt);
    }
    // The line without its leading timestamp field (which varies).
    static std::string strip_ts_logfmt(const std::string& line) {
        constexpr size_t n = 3 + 24 + 1;  // "ts=" timestamp " "
        bool ok = line.size() > n && line.compare(0, 3, "ts=") == 0 && is_timestamp(std::string_view(line).substr(3, 24)) &&
                  line[n - 1] == ' ';
        EXPECT_TRUE(ok) << line;
        return ok ? line.substr(n) : line;
    }
    static std::string strip_ts_json(const std::string& line) {
        constexpr size_t n = 7 + 24 + 2;  // {"ts":" timestamp ",
        bool ok = line.size() > n && line.compare(0, 7, "{\"ts\":\"") == 0 &&
                  is_timestamp(std::string_view(line).substr(7, 24)) && line.compare(n - 2, 2, "\",") == 0;
        EXPECT_TRUE(ok) << line;
        return ok ? "{" + line.substr(n) : line;
    }
};

TEST_F(LogTest, LogfmtPlain) {
    std::string l = render(Level::info, "started", {{"port", 7445}, {"name", "kprism"}, {"ok", true}});
    EXPECT_EQ(strip_ts_logfmt(l), "level=info msg=started port=7445 name=kprism ok=true");
    EXPECT_EQ(l.find('\n'), std::string::npos);
}

TEST_F(LogTest, LogfmtQuotesSpaces) {
    std::string l = render(Level::warn, "upstream unavailable", {{"reason", "connection refused"}});
    EXPECT_EQ(strip_ts_logfmt(l), R"(level=warn msg="upstream unavailable" reason="connection refused")");
}

TEST_F(LogTest, LogfmtEscapesQuotesAndBackslashes) {
    std::string l = render(Level::error, "x", {{"v", R"(say "hi" \o/)"}});
    EXPECT_EQ(strip_ts_logfmt(l), R"(level=error msg=x v="say \"hi\" \\o/")");
}

TEST_F(LogTest, LogfmtEscapesNewlinesAndControls) {
    std::string l = render(Level::info, "m", {{"v", "a\nb\rc\td\x01" "e\x7f"}});
    EXPECT_EQ(strip_ts_logfmt(l), R"(level=info msg=m v="a\nb\rc\td\u0001e\u007f")");
    EXPECT_EQ(l.find('\n'), std::string::npos);
    EXPECT_EQ(l.find('\r'), std::string::npos);
}

TEST_F(LogTest, LogfmtQuotesEqualsEmptyAndNonAscii) {
    std::string l = render(Level::info, "m", {{"a", "k=v"}, {"b", ""}, {"c", "h\xc3\xa9"}});
    EXPECT_EQ(strip_ts_logfmt(l), R"(level=info msg=m a="k=v" b="" c="h\u00c3\u00a9")");
}

TEST_F(LogTest, LogfmtNumbers) {
    std::string l = render(Level::debug, "n",
                           {{"i", int64_t{-5}}, {"u", uint64_t{18446744073709551615ULL}}, {"z", 0}, {"f", false}});
    EXPECT_EQ(strip_ts_logfmt(l), "level=debug msg=n i=-5 u=18446744073709551615 z=0 f=false");
}

TEST_F(LogTest, JsonPlain) {
    set_format(Format::json);
    std::string l = render(Level::info, "started", {{"port", 7445}, {"name", "kprism"}});
    EXPECT_EQ(strip_ts_json(l), R"({"level":"info","msg":"started","port":7445,"name":"kprism"})");
}

// Numbers and booleans keep their JSON types; strings stay strings, also when they look like a
// number; logfmt writes them all alike.
TEST_F(LogTest, JsonKeepsValueTypes) {
    set_format(Format::json);
    std::string l = render(Level::info, "ready",
                           {{"pid", 1119}, {"connections", uint64_t{0}}, {"notified_systemd", false}, {"ok", true},
                            {"delta", int64_t{-5}}, {"big", uint64_t{18446744073709551615ULL}}, {"status", "2/3 upstreams ready"},
                            {"digits", "7445"}, {"word", std::string("true")}});
    EXPECT_EQ(strip_ts_json(l),
              R"({"level":"info","msg":"ready","pid":1119,"connections":0,"notified_systemd":false,"ok":true,)"
              R"("delta":-5,"big":18446744073709551615,"status":"2/3 upstreams ready","digits":"7445","word":"true"})");
    nlohmann::json j = nlohmann::json::parse(l);
    EXPECT_TRUE(j["ts"].is_string());
    EXPECT_EQ(j["level"], "info");
    EXPECT_TRUE(j["pid"].is_number_integer());
    EXPECT_EQ(j["pid"].get<int>(), 1119);
    EXPECT_TRUE(j["connections"].is_number_integer());
    EXPECT_EQ(j["connections"].get<int>(), 0);
    EXPECT_TRUE(j["notified_systemd"].is_boolean());
    EXPECT_FALSE(j["notified_systemd"].get<bool>());
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_EQ(j["delta"].get<int64_t>(), -5);
    EXPECT_EQ(j["big"].get<uint64_t>(), 18446744073709551615ULL);
    EXPECT_TRUE(j["status"].is_string());
    EXPECT_TRUE(j["digits"].is_string());
    EXPECT_EQ(j["digits"], "7445");
    EXPECT_TRUE(j["word"].is_string());
    set_format(Format::logfmt);
    EXPECT_EQ(strip_ts_logfmt(render(Level::info, "ready", {{"pid", 1119}, {"notified_systemd", false}, {"digits", "7445"}})),
              "level=info msg=ready pid=1119 notified_systemd=false digits=7445");
}

// Every line the daemon can write parses with nlohmann, whatever bytes a string holds.
TEST_F(LogTest, JsonParsesWithHostileStrings) {
    set_format(Format::json);
    std::string hostile = "x\"y\\z\n\t\r\x01\x7f\xff\xc3{},:";
    std::string l = render(Level::warn, hostile, {{"e", hostile}, {"n", 3}, {"b", true}});
    nlohmann::json j = nlohmann::json::parse(l);
    EXPECT_TRUE(j["e"].is_string());
    EXPECT_EQ(j["n"], 3);
    EXPECT_EQ(j["b"], true);
}

TEST_F(LogTest, JsonNoFields) {
    set_format(Format::json);
    EXPECT_EQ(strip_ts_json(render(Level::warn, "w", {})), R"({"level":"warn","msg":"w"})");
}

TEST_F(LogTest, JsonEscapes) {
    set_format(Format::json);
    std::string l = render(Level::error, "bad \"msg\"", {{"v", "a b\n\"c\"\\\x1f"}, {"e", ""}});
    EXPECT_EQ(strip_ts_json(l), R"({"level":"error","msg":"bad \"msg\"","v":"a b\n\"c\"\\\u001f","e":""})");
    EXPECT_EQ(l.find('\n'), std::string::npos);
}

// Structural check: a JSON object of string members, every string properly escaped.
TEST_F(LogTest, JsonLooksValid) {
    set_format(Format::json);
    std::string hostile = "x\"y\\z\n\t\r\x01\x7f\xff{},:";
    std::string l = render(Level::info, hostile, {{"k1", hostile}, {"k2", "plain"}, {"k3", ""}});
    EXPECT_TRUE(flat_json_object(l)) << l;
    for (unsigned char c : l) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(c) << " in " << l;
    EXPECT_TRUE(flat_json_object(render(Level::warn, "", {})));
}

TEST(JsonChecker, SelfTest) {
    EXPECT_TRUE(flat_json_object(R"({"a":"b","c":"d\"e\u00ff"})"));
    EXPECT_TRUE(flat_json_object("{}"));
    EXPECT_FALSE(flat_json_object(R"({"a":"b",})"));
    EXPECT_FALSE(flat_json_object(R"({"a":"b"} )"));
    EXPECT_FALSE(flat_json_object("{\"a\":\"b\nc\"}"));  // raw newline
    EXPECT_FALSE(flat_json_object(R"({"a":"\x41"})"));
    EXPECT_FALSE(flat_json_object(R"({"a":"b")"));
    EXPECT_TRUE(is_timestamp("2024-01-02T03:04:05.678Z"));
    EXPECT_FALSE(is_timestamp("2024-01-02 03:04:05.678Z"));
}

TEST_F(LogTest, ParseLevel) {
    const std::pair<const char*, Level> names[] = {
        {"debug", Level::debug}, {"info", Level::info}, {"warn", Level::warn}, {"warning", Level::warn},
        {"error", Level::error}};
    for (const auto& [name, want] : names) {
        Level lv = want == Level::error ? Level::debug : Level::error;
        EXPECT_TRUE(parse_level(name, lv)) << name;
        EXPECT_EQ(lv, want) << name;
    }
    for (const char* name : {"", "INFO", "trace", "fatal"}) {
        Level lv = Level::info;
        EXPECT_FALSE(parse_level(name, lv)) << name;
        EXPECT_EQ(lv, Level::info) << name << ": unchanged on failure";
    }
}

TEST_F(LogTest, ParseFormat) {
    Format f = Format::json;
    EXPECT_TRUE(parse_format("logfmt", f));
    EXPECT_EQ(f, Format::logfmt);
    EXPECT_TRUE(parse_format("json", f));
    EXPECT_EQ(f, Format::json);
    for (const char* name : {"text", "JSON"}) {
        EXPECT_FALSE(parse_format(name, f)) << name;
        EXPECT_EQ(f, Format::json) << name << ": unchanged on failure";
    }
}

TEST_F(LogTest, LevelNames) {
    EXPECT_STREQ(level_name(Level::debug), "debug");
    EXPECT_STREQ(level_name(Level::info), "info");
    EXPECT_STREQ(level_name(Level::warn), "warn");
    EXPECT_STREQ(level_name(Level::error), "error");
    for (Level lv : {Level::debug, Level::info, Level::warn, Level::error}) {
        Level back{};
        EXPECT_TRUE(parse_level(level_name(lv), back));
        EXPECT_EQ(back, lv);
    }
}

TEST_F(LogTest, EnabledFollowsLevel) {
    set_level(Level::warn);
    EXPECT_FALSE(enabled(Level::debug));
    EXPECT_FALSE(enabled(Level::info));
    EXPECT_TRUE(enabled(Level::warn));
    EXPECT_TRUE(enabled(Level::error));
    set_level(Level::debug);
    EXPECT_TRUE(enabled(Level::debug));
}

TEST_F(LogTest, DebugMacroDoesNotEvaluateWhenDisabled) {
    set_level(Level::info);
    int evaluated = 0;
    auto value = [&] {
        ++evaluated;
        return std::string("x");
    };
    KPRISM_DEBUG("never", {{"v", value()}});
    EXPECT_EQ(evaluated, 0);
}

}  // namespace
}  // namespace kprism::log
