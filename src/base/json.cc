// SPDX-License-Identifier: Apache-2.0
// The bounds around nlohmann-json: a size limit before parsing, a depth limit while parsing (a
// parser callback), and replacement of invalid UTF-8 when dumping.
#include "kprism/base/json.h"

#include <fmt/format.h>

namespace kprism {

namespace {
struct TooDeep {};
}  // namespace

std::string json_dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool parse_json(std::string_view text, Json& out, std::string& error) {
    if (text.size() > kMaxJsonBytes) {
        error = fmt::format("document too large ({} bytes, at most {})", text.size(), kMaxJsonBytes);
        return false;
    }
    // The callback sees each object and array as it opens, `depth` being the number of enclosing
    // ones; aborting there keeps a hostile document from building a deep tree at all.
    auto limit = [](int depth, Json::parse_event_t event, Json&) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth)
            throw TooDeep{};
        return true;
    };
    try {
        out = Json::parse(text.begin(), text.end(), limit);
        return true;
    } catch (const TooDeep&) {
        error = fmt::format("nested deeper than {}", kMaxJsonDepth);
    } catch (const Json::exception& e) {
        // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." without the tag.
        std::string_view what = e.what();
        if (size_t tag = what.find("] "); what.rfind("[json.exception.", 0) == 0 && tag != std::string_view::npos)
            what.remove_prefix(tag + 2);
        error = std::string(what);
    }
    out = Json();
    return false;
}

}  // namespace kprism
