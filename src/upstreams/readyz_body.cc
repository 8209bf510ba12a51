// SPDX-License-Identifier: Apache-2.0
// Reading the failing check names out of a /readyz body, line by line, with fixed bounds.
#include "kprism/upstreams/readyz_body.h"

#include <algorithm>

namespace kprism {

namespace {

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '_' ||
           c == '.' || c == '-';
}

// The check name of a "[-]name failed..." line, or "" when the line is not one or the name is
// not of the allowed form.
std::string_view failing_name(std::string_view line, bool& failing) {
    failing = line.substr(0, 3) == "[-]";
    if (!failing) return {};
    line.remove_prefix(3);
    size_t end = line.find(' ');
    std::string_view name = line.substr(0, end);
    if (name.empty() || name.size() > FailingChecks::kMaxNameLen || !std::all_of(name.begin(), name.end(), name_char))
        return {};
    return name;
}

}  // namespace

bool FailingChecks::has(std::string_view name) const {
    return std::find(names.begin(), names.end(), name) != names.end();
}

std::string FailingChecks::str() const {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
    if (more > 0) s += (s.empty() ? "+" : ",+") + std::to_string(more) + " more";
    return s;
}

FailingChecks parse_readyz_body(std::string_view body) {
    FailingChecks out;
    // A body cut at the bound ends in a partial line: a name there may be cut too, so it only counts.
    const bool cut = body.size() >= kReadyzBodyMax;
    body = body.substr(0, kReadyzBodyMax);
    while (!body.empty()) {
        size_t nl = body.find('\n');
        std::string_view line = body.substr(0, nl);
        body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        bool failing = false;
        std::string_view name = failing_name(line, failing);
        if (!failing) continue;
        if (nl == std::string_view::npos && cut) name = {};
        if (!name.empty() && out.has(name)) continue;
        if (name.empty() || out.names.size() >= FailingChecks::kMaxNames) ++out.more;
        else out.names.emplace_back(name);
    }
    return out;
}

DownReason down_reason_of_checks(const FailingChecks& c) {
    if (c.has("shutdown")) return DownReason::shutdown;
    if (c.etcd()) return DownReason::etcd;
    return DownReason::other;
}

}  // namespace kprism
