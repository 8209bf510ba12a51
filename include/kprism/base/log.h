// SPDX-License-Identifier: Apache-2.0
// Structured logging: one line per event, logfmt (default) or JSON, to stderr.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace kprism::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };
enum class Format { logfmt, json };

// A key, an already formatted value and what kind of value it was. Keys are fixed identifiers;
// string values are escaped on output. In JSON lines numbers and booleans keep their type
// ("pid":1119, "notified_systemd":false) and strings are JSON strings; logfmt writes all alike.
struct Field {
    enum class Kind { string, number, boolean };
    std::string_view key;
    std::string value;
    Kind kind = Kind::string;
    Field(std::string_view k, std::string_view v) : key(k), value(v) {}
    Field(std::string_view k, const char* v) : key(k), value(v) {}
    Field(std::string_view k, const std::string& v) : key(k), value(v) {}
    Field(std::string_view k, int64_t v);
    Field(std::string_view k, uint64_t v);
    Field(std::string_view k, int v) : Field(k, static_cast<int64_t>(v)) {}
    Field(std::string_view k, unsigned v) : Field(k, static_cast<uint64_t>(v)) {}
    Field(std::string_view k, long long v) : Field(k, static_cast<int64_t>(v)) {}
    Field(std::string_view k, unsigned long long v) : Field(k, static_cast<uint64_t>(v)) {}
    Field(std::string_view k, bool v) : key(k), value(v ? "true" : "false"), kind(Kind::boolean) {}
};

void set_level(Level level);
void set_format(Format format);
bool enabled(Level level);

// Parses "debug", "info", "warn"/"warning", "error". Returns false on anything else.
bool parse_level(std::string_view s, Level& out);
bool parse_format(std::string_view s, Format& out);
const char* level_name(Level level);

// Renders one line (without the trailing newline) - exposed for tests.
std::string render(Level level, std::string_view msg, std::initializer_list<Field> fields);

void write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});
inline void info(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::info, m, f); }
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::warn, m, f); }
inline void error(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::error, m, f); }

}  // namespace kprism::log

// Debug lines on the data path: the fields are not even formatted unless debug is on.
#define KPRISM_DEBUG(...)                                                                  \
    do {                                                                                   \
        if (::kprism::log::enabled(::kprism::log::Level::debug))                           \
            ::kprism::log::write(::kprism::log::Level::debug, __VA_ARGS__);                \
    } while (0)
