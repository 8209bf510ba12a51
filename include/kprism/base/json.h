// SPDX-License-Identifier: Apache-2.0
// JSON for the /status document, with nlohmann-json: the daemon renders it with json_dump(), and
// `kprism status` / `kprism reload` read it with parse_json(), which bounds the input first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kprism {

// ordered: members stay in the order they were added (the /status document reads top-down).
using Json = nlohmann::ordered_json;

// Compact JSON text of `j`. Control characters in strings are escaped, valid UTF-8 is kept as it
// is, and a byte that is not part of valid UTF-8 becomes U+FFFD: the output is always valid UTF-8
// (nlohmann::json::error_handler_t::replace), whatever an upstream put in an error message.
std::string json_dump(const Json& j);

// Parses one JSON document (RFC 8259) of at most kMaxJsonBytes (checked before parsing), with
// arrays and objects nested at most kMaxJsonDepth deep. On failure returns false with `error` set
// to a short reason ("document too large", "nested deeper than 32", or the parser's message with
// the byte offset).
constexpr size_t kMaxJsonBytes = 4 * 1024 * 1024;
constexpr int kMaxJsonDepth = 32;
bool parse_json(std::string_view text, Json& out, std::string& error);

}  // namespace kprism
