// SPDX-License-Identifier: Apache-2.0
// The failing check names of a kube-apiserver /readyz body ("[-]etcd failed: reason withheld"),
// bounded, and the small fixed set of reasons they map to for a metric label.
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/enum_table.h"

namespace kprism {

// At most kMaxNames names of at most kMaxNameLen bytes of [A-Za-z0-9/_.-] are kept, in body
// order without repeats; every further failing line (or one whose name is not of that form)
// counts in `more`. The body is read as given: the probe keeps at most kReadyzBodyMax bytes of it.
struct FailingChecks {
    static constexpr size_t kMaxNames = 8;
    static constexpr size_t kMaxNameLen = 64;
    std::vector<std::string> names;
    size_t more = 0;

    bool empty() const { return names.empty() && more == 0; }
    bool has(std::string_view name) const;
    // Among them "etcd" or "etcd-readiness": the apiserver cannot reach etcd (quorum lost).
    bool etcd() const { return has("etcd") || has("etcd-readiness"); }
    // "etcd,etcd-readiness" or "etcd,+3 more"; "" when empty.
    std::string str() const;
    bool operator==(const FailingChecks&) const = default;
};

// The body bytes of a not-ready /readyz answer kprism reads (the rest is not read at all).
constexpr size_t kReadyzBodyMax = 8192;

FailingChecks parse_readyz_body(std::string_view body);

// The reason label of kprism_upstream_down_reason: a fixed small set, listed once in
// kDownReasonTable (a row per value, in the enum's order), which sizes every array and loop over
// them. A new reason goes before `last` and gets its row.
enum class DownReason { shutdown, etcd, other, unauthorized, connect, timeout, tls, last = tls };
struct DownReasonInfo {
    DownReason reason;
    const char* name;  // the metric label and /status's down_reason
};
inline constexpr DownReasonInfo kDownReasonTable[] = {
    {DownReason::shutdown, "shutdown"},         {DownReason::etcd, "etcd"},       {DownReason::other, "other"},
    {DownReason::unauthorized, "unauthorized"}, {DownReason::connect, "connect"}, {DownReason::timeout, "timeout"},
    {DownReason::tls, "tls"},
};
inline constexpr size_t kDownReasons = std::size(kDownReasonTable);
static_assert(is_enum_table<&DownReasonInfo::reason>(kDownReasonTable), "kDownReasonTable: a row per DownReason, in order");
constexpr const char* down_reason_name(DownReason r) { return kDownReasonTable[static_cast<size_t>(r)].name; }
// "shutdown" wins over the etcd checks (an apiserver shutting down may lose etcd on its way out),
// those over any other name; no name at all is `other`.
DownReason down_reason_of_checks(const FailingChecks& c);

}  // namespace kprism
