// SPDX-License-Identifier: Apache-2.0
// Parsing and printing of Go-style durations for config values and flags.
#include "kprism/base/duration.h"

#include <fmt/format.h>

#include <cstdint>

namespace kprism {
namespace {

struct Unit {
    std::string_view name;
    double ns;
};

constexpr Unit kUnits[] = {
    {"ns", 1.0}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9},
};

bool fail(std::string* error, std::string msg) {
    if (error) *error = std::move(msg);
    return false;
}

}  // namespace

std::optional<Duration> parse_duration(std::string_view s, std::string* error) {
    if (s.empty()) {
        fail(error, "empty duration");
        return std::nullopt;
    }
    if (s == "0") return Duration{0};
    // Whole nanoseconds in integers, so "1ns" is exactly 1 and never rounds to a millisecond.
    constexpr int64_t kMaxNs = int64_t{86400} * 365 * 1000000000;  // 8760h
    int64_t total_ns = 0;
    size_t i = 0;
    auto bad = [&](std::string msg) -> std::optional<Duration> {
        fail(error, std::move(msg));
        return std::nullopt;
    };
    auto too_large = [&] { return bad(fmt::format("duration '{}' is too large (at most 8760h)", s)); };
    while (i < s.size()) {
        size_t start = i;
        while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
        std::string_view num = s.substr(start, i - start);
        size_t dot = num.find('.');
        if (num.empty() || num == "." || dot != num.rfind('.'))
            return bad(fmt::format("invalid duration '{}' (want e.g. 500ms, 5s, 1m30s)", s));
        size_t ustart = i;
        while (i < s.size() && !((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
        std::string_view unit = s.substr(ustart, i - ustart);
        const Unit* found = nullptr;
        for (const auto& u : kUnits)
            if (u.name == unit) found = &u;
        if (!found)
            return bad(unit.empty() ? fmt::format("missing unit in duration '{}' (want e.g. 5s)", s)
                                    : fmt::format("unknown unit '{}' in duration '{}'", unit, s));
        const auto unit_ns = static_cast<int64_t>(found->ns);
        std::string_view whole = num.substr(0, dot), frac = dot == std::string_view::npos ? "" : num.substr(dot + 1);
        // Every product and sum is checked against the bound before it is formed: a signed overflow
        // is undefined, and in practice wraps a huge value into a plausible one.
        int64_t w = 0;
        for (char c : whole) {
            if (w > (kMaxNs - (c - '0')) / 10) return too_large();
            w = w * 10 + (c - '0');
        }
        if (w > kMaxNs / unit_ns) return too_large();
        int64_t part = w * unit_ns;
        int64_t scale = unit_ns;
        for (char c : frac) {  // digits beyond the unit's nanosecond resolution must be zero
            if (scale % 10 != 0) {
                if (c != '0') return bad(fmt::format("duration '{}' is finer than a nanosecond", s));
                continue;
            }
            scale /= 10;
            part += (c - '0') * scale;
        }
        // part <= kMaxNs + unit_ns (the fraction adds less than one unit) and total_ns <= kMaxNs: no overflow.
        if (part > kMaxNs || part > kMaxNs - total_ns) return too_large();
        total_ns += part;
    }
    if (total_ns % 1000000 != 0)
        return bad(fmt::format("duration '{}' is not a whole number of milliseconds", s));
    return Duration{total_ns / 1000000};
}

std::string format_duration(Duration d) {
    int64_t ms = d.count();
    if (ms == 0) return "0s";
    std::string out;
    if (ms < 0) {
        out += '-';
        ms = -ms;
    }
    if (ms < 1000) return out + fmt::format("{}ms", ms);
    int64_t h = ms / 3600000, m = (ms / 60000) % 60, s = (ms / 1000) % 60, rest = ms % 1000;
    if (h) out += fmt::format("{}h", h);
    if (m) out += fmt::format("{}m", m);
    if (s || rest) {
        if (rest) out += fmt::format("{}.{:03}", s, rest);
        else out += fmt::format("{}", s);
        while (rest && out.back() == '0') out.pop_back();
        out += 's';
    }
    return out;
}

}  // namespace kprism
