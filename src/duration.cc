// Parsing and printing of Go-style durations for config values and flags.
#include "kprism/duration.h"

#include <fmt/format.h>

#include <cmath>
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
    double total_ns = 0;
    size_t i = 0;
    while (i < s.size()) {
        size_t start = i;
        while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
        std::string_view num = s.substr(start, i - start);
        if (num.empty() || num == "." || num.find('.') != num.rfind('.')) {
            fail(error, fmt::format("invalid duration '{}' (want e.g. 500ms, 5s, 1m30s)", s));
            return std::nullopt;
        }
        size_t ustart = i;
        while (i < s.size() && !((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
        std::string_view unit = s.substr(ustart, i - ustart);
        const Unit* found = nullptr;
        for (const auto& u : kUnits)
            if (u.name == unit) found = &u;
        if (!found) {
            fail(error, unit.empty() ? fmt::format("missing unit in duration '{}' (want e.g. 5s)", s)
                                     : fmt::format("unknown unit '{}' in duration '{}'", unit, s));
            return std::nullopt;
        }
        total_ns += std::strtod(std::string(num).c_str(), nullptr) * found->ns;
        if (total_ns > 1e9 * 86400 * 365) {
            fail(error, fmt::format("duration '{}' is too large", s));
            return std::nullopt;
        }
    }
    double ms = total_ns / 1e6;
    if (std::fabs(ms - std::round(ms)) > 1e-6) {
        fail(error, fmt::format("duration '{}' is not a whole number of milliseconds", s));
        return std::nullopt;
    }
    return Duration{static_cast<int64_t>(std::llround(ms))};
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
