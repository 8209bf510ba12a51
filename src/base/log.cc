// SPDX-License-Identifier: Apache-2.0
// Structured logging: logfmt or JSON lines on stderr, written with one write(2) each.
#include "kprism/base/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace kprism::log {
namespace {

Level g_level = Level::info;
Format g_format = Format::logfmt;

bool needs_quotes(std::string_view v) {
    if (v.empty()) return true;
    for (unsigned char c : v)
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f) return true;
    return false;
}

// Escapes for both formats: quotes, backslashes and control bytes; non-ASCII bytes as \u00XX so
// a hostile upstream string can never break a log line.
void append_escaped(std::string& out, std::string_view v) {
    for (unsigned char c : v) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20 || c >= 0x7f)
                fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
            else
                out += static_cast<char>(c);
        }
    }
}

// `bare`: a number or boolean, written as it is in both formats (its text is digits, '-', "true"
// or "false", never anything to escape).
void append_value(std::string& out, std::string_view v, bool json, bool bare) {
    if (bare) {
        out += v;
    } else if (json || needs_quotes(v)) {
        out += '"';
        append_escaped(out, v);
        out += '"';
    } else {
        out += v;
    }
}

std::string timestamp() {
    auto now = std::chrono::system_clock::now();
    auto secs = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                       tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace

Field::Field(std::string_view k, int64_t v) : key(k), value(fmt::format("{}", v)), kind(Kind::number) {}
Field::Field(std::string_view k, uint64_t v) : key(k), value(fmt::format("{}", v)), kind(Kind::number) {}

void set_level(Level level) { g_level = level; }
void set_format(Format format) { g_format = format; }
bool enabled(Level level) { return level >= g_level; }

const char* level_name(Level level) {
    switch (level) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    }
    return "info";
}

bool parse_level(std::string_view s, Level& out) {
    if (s == "debug") out = Level::debug;
    else if (s == "info") out = Level::info;
    else if (s == "warn" || s == "warning") out = Level::warn;
    else if (s == "error") out = Level::error;
    else return false;
    return true;
}

bool parse_format(std::string_view s, Format& out) {
    if (s == "logfmt") out = Format::logfmt;
    else if (s == "json") out = Format::json;
    else return false;
    return true;
}

std::string render(Level level, std::string_view msg, std::initializer_list<Field> fields) {
    const bool json = g_format == Format::json;
    std::string line;
    line.reserve(128);
    auto field = [&](std::string_view k, std::string_view v, bool bare = false) {
        if (json) {
            if (line.size() > 1) line += ',';
            line += '"';
            line += k;
            line += "\":";
        } else {
            if (!line.empty()) line += ' ';
            line += k;
            line += '=';
        }
        append_value(line, v, json, bare);
    };
    if (json) line += '{';
    field("ts", timestamp());
    field("level", level_name(level));
    field("msg", msg);
    for (const auto& f : fields) field(f.key, f.value, f.kind != Field::Kind::string);
    if (json) line += '}';
    return line;
}

void write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
    if (!enabled(level)) return;
    std::string line = render(level, msg, fields);
    line += '\n';
    // One write per line keeps lines whole when several processes share the stream.
    size_t off = 0;
    while (off < line.size()) {
        ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
    }
}

}  // namespace kprism::log
