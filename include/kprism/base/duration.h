// SPDX-License-Identifier: Apache-2.0
// Go-style duration strings ("500ms", "5s", "1m30s", "1.5h") to and from milliseconds.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kprism {

using Duration = std::chrono::milliseconds;

// Parses a Go-style duration. Units: ns, us, µs, ms, s, m, h; fractions allowed ("1.5s"); a bare
// "0" is zero. The result must be a whole number of milliseconds (kprism's resolution).
// On failure returns nullopt and sets *error to a short reason.
std::optional<Duration> parse_duration(std::string_view s, std::string* error = nullptr);

// Formats like Go does for whole milliseconds: "0s", "250ms", "5s", "1m30s", "2h0m0s" -> "2h".
std::string format_duration(Duration d);

}  // namespace kprism
