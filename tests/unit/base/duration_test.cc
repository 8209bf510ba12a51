// SPDX-License-Identifier: Apache-2.0
// Go-style duration parsing and formatting (kprism/base/duration.h).
#include "kprism/base/duration.h"

#include <gtest/gtest.h>

#include <string>

namespace kprism {
namespace {

using namespace std::chrono_literals;

int64_t ms_of(std::string_view s) {
    std::string err;
    auto d = parse_duration(s, &err);
    EXPECT_TRUE(d.has_value()) << "'" << s << "' rejected: " << err;
    return d ? d->count() : -1;
}

std::string error_of(std::string_view s) {
    std::string err;
    auto d = parse_duration(s, &err);
    EXPECT_FALSE(d.has_value()) << "'" << s << "' unexpectedly parsed as " << (d ? d->count() : 0) << "ms";
    return err;
}

TEST(ParseDuration, Milliseconds) { EXPECT_EQ(ms_of("500ms"), 500); }
TEST(ParseDuration, Seconds) { EXPECT_EQ(ms_of("5s"), 5000); }
TEST(ParseDuration, Compound) { EXPECT_EQ(ms_of("1m30s"), 90000); }
TEST(ParseDuration, Fraction) { EXPECT_EQ(ms_of("1.5s"), 1500); }
TEST(ParseDuration, BareZero) { EXPECT_EQ(ms_of("0"), 0); }
TEST(ParseDuration, Hour) { EXPECT_EQ(ms_of("1h"), 3600000); }
TEST(ParseDuration, FractionalHour) { EXPECT_EQ(ms_of("1.5h"), 5400000); }
TEST(ParseDuration, AllUnitsSummed) { EXPECT_EQ(ms_of("1h2m3s4ms"), 3723004); }
TEST(ParseDuration, ZeroWithUnit) { EXPECT_EQ(ms_of("0s"), 0); }
TEST(ParseDuration, LeadingDotFraction) { EXPECT_EQ(ms_of(".5s"), 500); }
TEST(ParseDuration, WholeMsFromMicrosAndNanos) {
    EXPECT_EQ(ms_of("1000us"), 1);
    EXPECT_EQ(ms_of("2000\xc2\xb5s"), 2);  // µs
    EXPECT_EQ(ms_of("3000000ns"), 3);
}
TEST(ParseDuration, TenthsAreExact) {
    EXPECT_EQ(ms_of("0.1s"), 100);
    EXPECT_EQ(ms_of("0.3s"), 300);
    EXPECT_EQ(ms_of("1.001s"), 1001);
}

TEST(ParseDuration, SubMillisecondRejected) {
    EXPECT_NE(error_of("250us").find("whole number of milliseconds"), std::string::npos);
    EXPECT_NE(error_of("1.5ms").find("whole number of milliseconds"), std::string::npos);
    EXPECT_NE(error_of("1.0001s").find("whole number of milliseconds"), std::string::npos);
}

// A single nanosecond is not a whole number of milliseconds either; it must not silently become 0.
TEST(ParseDuration, OneNanosecondRejected) {
    EXPECT_NE(error_of("1ns").find("whole number of milliseconds"), std::string::npos);
    EXPECT_NE(error_of("1000001ns").find("whole number of milliseconds"), std::string::npos);
}

TEST(ParseDuration, MissingUnit) { EXPECT_NE(error_of("5").find("missing unit"), std::string::npos); }
TEST(ParseDuration, MissingUnitAfterCompound) { EXPECT_NE(error_of("1m30").find("missing unit"), std::string::npos); }
TEST(ParseDuration, Empty) { EXPECT_NE(error_of("").find("empty"), std::string::npos); }
TEST(ParseDuration, UnknownUnit) {
    std::string e = error_of("5x");
    EXPECT_NE(e.find("unknown unit 'x'"), std::string::npos) << e;
}
TEST(ParseDuration, Negative) { EXPECT_NE(error_of("-5s").find("invalid duration '-5s'"), std::string::npos); }
TEST(ParseDuration, UnitOnly) { EXPECT_NE(error_of("s").find("invalid duration 's'"), std::string::npos); }
TEST(ParseDuration, DoubleDot) { EXPECT_NE(error_of("1..5s").find("invalid duration"), std::string::npos); }
TEST(ParseDuration, LoneDot) { EXPECT_NE(error_of(".s").find("invalid duration"), std::string::npos); }
TEST(ParseDuration, Whitespace) {
    error_of(" 5s");
    error_of("5 s");
    error_of("5s ");
}
TEST(ParseDuration, UnitsAreCaseSensitive) {
    error_of("5S");
    error_of("1H");
}
TEST(ParseDuration, TooLarge) { EXPECT_NE(error_of("100000h").find("too large"), std::string::npos); }
// The bound is checked before every multiplication and sum: 160127986751h times 3.6e12 ns wraps
// an int64_t to 176512000000 (2m56.512s), a value every range check would have let through.
TEST(ParseDuration, HugeValuesAreTooLargeNotWrapped) {
    for (std::string_view s : {"160127986751h", "999999999999h", "2562048h", "153722868m", "9223372037s",
                               "999999999999.5h", "99999999999999999999999ns", "1h160127986751h",
                               "8760h8760h", "8760h1ms", "8760.000001h"}) {
        std::string e = error_of(s);
        EXPECT_NE(e.find("too large (at most 8760h)"), std::string::npos) << s << ": " << e;
    }
}

TEST(ParseDuration, UpToTheBound) {
    EXPECT_EQ(ms_of("8760h"), int64_t{8760} * 3600 * 1000);
    EXPECT_EQ(ms_of("8759h59m59.999s"), int64_t{8760} * 3600 * 1000 - 1);
    EXPECT_EQ(ms_of("525600m"), int64_t{8760} * 3600 * 1000);
    EXPECT_EQ(ms_of("31536000000000000ns"), int64_t{8760} * 3600 * 1000);
    EXPECT_EQ(ms_of("0000000000000005s"), 5000);  // leading zeros count for nothing, as in Go
}

TEST(ParseDuration, NullErrorPointerIsAllowed) {
    EXPECT_FALSE(parse_duration("bogus").has_value());
    EXPECT_FALSE(parse_duration("").has_value());
    EXPECT_EQ(parse_duration("2s")->count(), 2000);
}

TEST(FormatDuration, Values) {
    EXPECT_EQ(format_duration(0ms), "0s");
    EXPECT_EQ(format_duration(250ms), "250ms");
    EXPECT_EQ(format_duration(5s), "5s");
    EXPECT_EQ(format_duration(90s), "1m30s");
    EXPECT_EQ(format_duration(1500ms), "1.5s");
    EXPECT_EQ(format_duration(2h), "2h");
    EXPECT_EQ(format_duration(1001ms), "1.001s");
    EXPECT_EQ(format_duration(1010ms), "1.01s");
    EXPECT_EQ(format_duration(60s), "1m");
    EXPECT_EQ(format_duration(90min), "1h30m");
    EXPECT_EQ(format_duration(-1500ms), "-1.5s");
    EXPECT_EQ(format_duration(-500ms), "-500ms");
}

TEST(FormatDuration, RoundTrips) {
    for (int64_t ms : {0LL, 1LL, 250LL, 999LL, 1000LL, 1500LL, 5000LL, 59999LL, 60000LL, 90000LL, 3600000LL,
                       3600500LL, 3630000LL, 7200000LL, 86400000LL, 123456789LL}) {
        std::string text = format_duration(Duration{ms});
        std::string err;
        auto back = parse_duration(text, &err);
        ASSERT_TRUE(back.has_value()) << ms << " -> '" << text << "': " << err;
        EXPECT_EQ(back->count(), ms) << "'" << text << "'";
    }
}

}  // namespace
}  // namespace kprism
