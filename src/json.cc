// JSON string quoting (always valid UTF-8 out) and a bounded recursive-descent parser.
#include "kprism/json.h"

#include <fmt/format.h>

#include <cstdlib>

namespace kprism {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if there is none (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
size_t utf8_len(std::string_view s, size_t i) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xc0) == 0x80; };
    unsigned char c = b(0);
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (!cont(1) || !cont(2)) return 0;
        if (c == 0xe0 && b(1) < 0xa0) return 0;  // overlong
        if (c == 0xed && b(1) >= 0xa0) return 0;  // surrogate
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if (c == 0xf0 && b(1) < 0x90) return 0;  // overlong
        if (c == 0xf4 && b(1) >= 0x90) return 0;  // above U+10FFFF
        return 4;
    }
    return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

class Parser {
public:
    explicit Parser(std::string_view t) : t_(t) {}

    std::optional<JsonValue> document(std::string* error) {
        JsonValue v;
        bool ok = t_.size() <= kMaxJsonBytes ? (ws(), value(v, 0)) : fail("document too large");
        if (ok) {
            ws();
            if (i_ != t_.size()) ok = fail("trailing characters");
        }
        if (!ok) {
            if (error) *error = fmt::format("{} at byte {}", why_, i_);
            return std::nullopt;
        }
        return v;
    }

private:
    bool fail(const char* why) {
        if (!why_) why_ = why;
        return false;
    }
    void ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
    }
    bool eat(char c) {
        if (i_ < t_.size() && t_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    bool literal(std::string_view word) {
        if (t_.substr(i_, word.size()) != word) return fail("invalid literal");
        i_ += word.size();
        return true;
    }

    bool value(JsonValue& v, int depth) {
        if (depth > kMaxJsonDepth) return fail("nested too deep");
        if (i_ >= t_.size()) return fail("unexpected end");
        switch (t_[i_]) {
        case '{': return object(v, depth);
        case '[': return array(v, depth);
        case '"': v.type = JsonValue::Type::string; return string(v.string);
        case 't': v.type = JsonValue::Type::boolean; v.boolean = true; return literal("true");
        case 'f': v.type = JsonValue::Type::boolean; v.boolean = false; return literal("false");
        case 'n': v.type = JsonValue::Type::null; return literal("null");
        default: return number(v);
        }
    }

    bool object(JsonValue& v, int depth) {
        v.type = JsonValue::Type::object;
        ++i_;
        ws();
        if (eat('}')) return true;
        for (;;) {
            ws();
            if (i_ >= t_.size() || t_[i_] != '"') return fail("expected a member name");
            std::string key;
            if (!string(key)) return false;
            ws();
            if (!eat(':')) return fail("expected ':'");
            ws();
            JsonValue member;
            if (!value(member, depth + 1)) return false;
            v.object.emplace_back(std::move(key), std::move(member));
            ws();
            if (eat('}')) return true;
            if (!eat(',')) return fail("expected ',' or '}'");
        }
    }

    bool array(JsonValue& v, int depth) {
        v.type = JsonValue::Type::array;
        ++i_;
        ws();
        if (eat(']')) return true;
        for (;;) {
            ws();
            JsonValue el;
            if (!value(el, depth + 1)) return false;
            v.array.push_back(std::move(el));
            ws();
            if (eat(']')) return true;
            if (!eat(',')) return fail("expected ',' or ']'");
        }
    }

    bool hex4(uint32_t& out) {
        if (i_ + 4 > t_.size()) return fail("short \\u escape");
        out = 0;
        for (int k = 0; k < 4; ++k) {
            char c = t_[i_++];
            out <<= 4;
            if (c >= '0' && c <= '9') out |= static_cast<uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f') out |= static_cast<uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') out |= static_cast<uint32_t>(c - 'A' + 10);
            else return fail("bad \\u escape");
        }
        return true;
    }

    bool string(std::string& out) {
        ++i_;  // the opening quote
        for (;;) {
            if (i_ >= t_.size()) return fail("unterminated string");
            auto c = static_cast<unsigned char>(t_[i_]);
            if (c == '"') {
                ++i_;
                return true;
            }
            if (c < 0x20) return fail("control character in string");
            if (c != '\\') {
                size_t n = utf8_len(t_, i_);
                if (n == 0) return fail("invalid UTF-8 in string");
                out.append(t_.substr(i_, n));
                i_ += n;
                continue;
            }
            if (++i_ >= t_.size()) return fail("unterminated string");
            char e = t_[i_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!hex4(cp)) return false;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (!eat('\\') || !eat('u') || !hex4(lo) || lo < 0xdc00 || lo > 0xdfff)
                        return fail("unpaired surrogate");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    return fail("unpaired surrogate");
                }
                append_utf8(out, cp);
                break;
            }
            default: return fail("bad escape");
            }
        }
    }

    bool number(JsonValue& v) {
        size_t start = i_;
        auto digit = [&] { return i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9'; };
        eat('-');
        if (eat('0')) {
        } else if (digit()) {
            while (digit()) ++i_;
        } else {
            return fail("unexpected character");
        }
        if (eat('.')) {
            if (!digit()) return fail("bad number");
            while (digit()) ++i_;
        }
        if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
            ++i_;
            if (!eat('+')) eat('-');
            if (!digit()) return fail("bad number");
            while (digit()) ++i_;
        }
        v.type = JsonValue::Type::number;
        v.number = std::strtod(std::string(t_.substr(start, i_ - start)).c_str(), nullptr);
        return true;
    }

    std::string_view t_;
    size_t i_ = 0;
    const char* why_ = nullptr;
};

}  // namespace

std::string json_quote(std::string_view s) {
    std::string out = "\"";
    out.reserve(s.size() + 2);
    for (size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\u{:04x}", c);
        } else if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (size_t n = utf8_len(s, i); n > 0) {
            out.append(s.substr(i, n));
            i += n;
            continue;
        } else {
            out += "\\ufffd";
        }
        ++i;
    }
    return out + "\"";
}

const JsonValue* JsonValue::get(std::string_view key) const {
    if (type != Type::object) return nullptr;
    for (const auto& [k, v] : object)
        if (k == key) return &v;
    return nullptr;
}

std::optional<JsonValue> parse_json(std::string_view text, std::string* error) { return Parser(text).document(error); }

}  // namespace kprism
