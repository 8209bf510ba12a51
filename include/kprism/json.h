// Just enough JSON for the /status document: string quoting for the daemon, a small bounded
// parser for `kprism status`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kprism {

// `s` as a JSON string literal, quotes included. Control characters are escaped; valid UTF-8 is
// kept; a byte that is not part of valid UTF-8 becomes U+FFFD, so the output is always valid.
std::string json_quote(std::string_view s);

struct JsonValue {
    enum class Type { null, boolean, number, string, array, object };
    Type type = Type::null;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<JsonValue> array;
    // In document order. The `{}` lets clang (libstdc++'s C++20 std::pair) compile the recursive
    // type: without it the implicit default constructor needs the pair complete while declaring it.
    std::vector<std::pair<std::string, JsonValue>> object{};

    // The member `key` of an object, or nullptr (also when this is not an object).
    const JsonValue* get(std::string_view key) const;
    bool is_null() const { return type == Type::null; }
};

// Parses one JSON document (RFC 8259) of at most kMaxJsonBytes, nested at most kMaxJsonDepth
// deep. On failure returns nullopt with *error set to a short reason and the byte offset.
constexpr size_t kMaxJsonBytes = 4 * 1024 * 1024;
constexpr int kMaxJsonDepth = 32;
std::optional<JsonValue> parse_json(std::string_view text, std::string* error = nullptr);

}  // namespace kprism
