// SPDX-License-Identifier: Apache-2.0
// toml++ with kprism's workarounds (toml_compat.h): the table-header pre-check and the parse
// errors, positioned, as one line each.
#include "kprism/config/toml_compat.h"

#include <fmt/format.h>

namespace kprism {

namespace {

// Workaround 3 of toml_compat.h.
bool check_table_headers(std::string_view text, std::string_view name, std::vector<std::string>& errors) {
    int depth = 0;  // open '[' of arrays, outside strings and comments
    size_t line_no = 1;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        size_t i = line.find_first_not_of(" \t");
        if (depth == 0 && i != std::string_view::npos && line[i] == '[') {
            size_t k = i + 1;
            if (k < line.size() && line[k] == '[') ++k;
            while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
            char c = k < line.size() ? line[k] : '\0';
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-' || c == '"' || c == '\'';
            if (!ok) {
                errors.push_back(fmt::format("{}:{}:{}: invalid TOML: invalid table header", name, line_no, k + 1));
                return false;
            }
        } else {
            char quote = 0;
            for (size_t j = 0; j < line.size(); ++j) {
                char c = line[j];
                if (quote) {
                    if (c == '\\' && quote == '"') ++j;
                    else if (c == quote) quote = 0;
                } else if (c == '"' || c == '\'') {
                    quote = c;
                } else if (c == '#') {
                    break;
                } else if (c == '[') {
                    ++depth;
                } else if (c == ']' && depth > 0) {
                    --depth;
                }
            }
        }
        ++line_no;
        pos = end + 1;
    }
    return true;
}


}  // namespace

void toml_check_failed(const char* expr) { throw TomlCheckFailed(expr); }

std::optional<toml::table> parse_toml(std::string_view text, std::string_view name, std::vector<std::string>& errors) {
    if (!check_table_headers(text, name, errors)) return std::nullopt;
    try {
        return toml::parse(text, name);
    } catch (const toml::parse_error& e) {
        errors.push_back(fmt::format("{}:{}:{}: invalid TOML: {}", name, e.source().begin.line,
                                     e.source().begin.column, e.description()));
    } catch (const TomlCheckFailed& e) {  // workaround 1: the parser has no position to give
        errors.push_back(fmt::format("{}: invalid TOML: malformed value, array or table (the parser's check "
                                     "'{}' failed; look for a bracket or brace that does not match)",
                                     name, e.what()));
    }
    return std::nullopt;
}

}  // namespace kprism
