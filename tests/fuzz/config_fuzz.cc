// SPDX-License-Identifier: Apache-2.0
// Fuzzes what `kprism check` runs (src/config/config.cc): flags via parse_command_line, TOML via load_config_text, validation.
//
// Input: without a NUL byte, the whole input is the TOML file of `kprism check --config fuzz.toml`.
// With one, the bytes before the first NUL are the command line after "kprism", one argument per
// line ('\n'), and the bytes after it are the content of the file that --config names (not read at
// all without --config, as kprism does). The file is never opened: load_config() reads it and hands
// the text to load_config_text(), which is called here directly.
// Checked: no crash, UB or leak; a valid configuration satisfies validation's rules; and the
// rendering `kprism check` prints loads again as a valid configuration with the same values.
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "kprism/config/config.h"

using namespace kprism;

namespace {

// render_config() without the origin comments ("  # fuzz.toml:3") and the header line.
std::string values_of(const Config& c) {
    std::string r = render_config(c), out;
    size_t pos = r.find('\n') + 1;  // skip "# kprism ... effective configuration (file ...)"
    while (pos < r.size()) {
        size_t end = r.find('\n', pos);
        if (end == std::string::npos) end = r.size();
        std::string_view line(r.data() + pos, end - pos);
        if (size_t hash = line.rfind("  # "); hash != std::string_view::npos) line = line.substr(0, hash);
        out.append(line).push_back('\n');
        pos = end + 1;
    }
    return out;
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0x7f >> n);
        for (size_t k = 1; k < n; ++k) {
            auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n;
    }
    return true;
}

void check_valid(const Config& c) {
    FUZZ_CHECK(!c.endpoints.empty() && c.endpoints.size() <= 64);
    FUZZ_CHECK(!c.listen.empty() && c.listen.size() == c.s.bind_address.size());
    for (const auto& e : c.endpoints) FUZZ_CHECK(!e.addr.host.empty() && e.addr.port > 0);
    FUZZ_CHECK(c.s.health_timeout < c.s.health_interval);
    FUZZ_CHECK(c.s.health_fast_interval <= c.s.health_interval);
    FUZZ_CHECK(c.s.health_port != c.s.bind_port);
    FUZZ_CHECK(!c.s.health_path.empty() && c.s.health_path[0] == '/');
    for (const auto& o : options()) {
        std::visit(
            [&](auto member) {
                using T = std::remove_cvref_t<decltype(c.s.*member)>;
                if constexpr (std::is_same_v<T, int64_t>) FUZZ_CHECK(c.s.*member >= o.min && c.s.*member <= o.max);
                if constexpr (std::is_same_v<T, Duration>) {
                    FUZZ_CHECK((c.s.*member).count() >= o.min && (c.s.*member).count() <= o.max);
                    // Durations print as they parse.
                    auto back = parse_duration(format_duration(c.s.*member));
                    FUZZ_CHECK(back && *back == c.s.*member);
                }
                if constexpr (std::is_same_v<T, std::string>) {
                    if (!o.choices.empty()) {
                        bool one_of = false;
                        for (const char* ch : o.choices) one_of = one_of || c.s.*member == ch;
                        FUZZ_CHECK(one_of);
                    }
                }
            },
            o.field);
    }
}

// Every string a setting can hold is valid UTF-8 when it comes from TOML; one from a flag is raw
// bytes, which no TOML file can hold, so the round trip is only asked of UTF-8 values.
bool all_utf8(const Config& c) {
    bool ok = true;
    for (const auto& o : options()) {
        std::visit(
            [&](auto member) {
                using T = std::remove_cvref_t<decltype(c.s.*member)>;
                if constexpr (std::is_same_v<T, std::string>) ok = ok && valid_utf8(c.s.*member);
                if constexpr (std::is_same_v<T, std::vector<std::string>>)
                    for (const auto& v : c.s.*member) ok = ok && valid_utf8(v);
            },
            o.field);
    }
    for (const auto& [k, m] : c.s.endpoint_meta) ok = ok && valid_utf8(m.zone) && valid_utf8(m.server_name);
    return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> args{"kprism"};
    std::string_view file = in;
    if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
        std::string_view line = in.substr(0, nul);
        file = in.substr(nul + 1);
        while (true) {
            size_t nl = line.find('\n');
            args.emplace_back(line.substr(0, nl));
            if (nl == std::string_view::npos) break;
            line.remove_prefix(nl + 1);
        }
    } else {
        args.insert(args.end(), {"check", "--config", "fuzz.toml"});
    }
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);

    CommandLine cl;
    std::vector<std::string> errors;
    if (!parse_command_line(static_cast<int>(args.size()), argv.data(), cl, errors)) {
        FUZZ_CHECK(!errors.empty());
        return 0;
    }
    FUZZ_CHECK(errors.empty());
    if (cl.command == Command::help) {
        FUZZ_CHECK(!usage_text().empty());
        return 0;
    }
    if (cl.command == Command::version) return 0;

    Config cfg;
    bool ok = cl.config_file.empty() ? load_config(cl, cfg, errors)  // no file: flags only, nothing is read
                                     : load_config_text(file, cl.config_file, cl, cfg, errors);
    if (!ok) {
        FUZZ_CHECK(!errors.empty());
        for (const auto& e : errors) FUZZ_CHECK(!e.empty());
        return 0;
    }
    FUZZ_CHECK(errors.empty());
    // status and reload read health.* only (they talk to a running kprism); nothing is validated
    if (cl.command == Command::status || cl.command == Command::reload) return 0;
    check_valid(cfg);

    // What `kprism check` prints is a configuration file that loads to the same values.
    std::string rendered = render_config(cfg);
    if (!all_utf8(cfg)) return 0;
    CommandLine again;
    again.command = Command::check;
    again.config_file = "rendered.toml";
    Config back;
    std::vector<std::string> errors2;
    bool ok2 = load_config_text(rendered, again.config_file, again, back, errors2);
    if (!ok2) {
        for (const auto& e : errors2) std::fprintf(stderr, "rendered config rejected: %s\n", e.c_str());
        std::fprintf(stderr, "--- rendered ---\n%s---\n", rendered.c_str());
    }
    FUZZ_CHECK(ok2);
    FUZZ_CHECK(values_of(back) == values_of(cfg));
    return 0;
}
