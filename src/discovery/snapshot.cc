// SPDX-License-Identifier: Apache-2.0
// The discovery snapshot file: format, the checks when it is read at start, the atomic write.
#include "kprism/discovery/snapshot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kprism/base/duration.h"
#include "kprism/base/json.h"
#include "kprism/discovery/parse.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

namespace {

constexpr const char* kKind = "kprism-discovery-snapshot";
// 3 (written): endpoints that passed a check, as {"address": "ip:port", "zone": "..."} ("zone"
// only when there is one). 2: the same endpoints as "ip:port" strings, no zones. 1: "ip:port"
// strings, endpoints checked or not.
constexpr int kVersion = kSnapshotVersion;

bool read_bounded(const std::string& path, size_t max, std::string& out, std::string& err) {
    // O_NONBLOCK: a FIFO put at the path would otherwise hold open() until a writer comes.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        err = fmt::format("cannot read: {}", std::strerror(errno));
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        err = "cannot read: not a regular file";
        ::close(fd);
        return false;
    }
    out.clear();
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = fmt::format("cannot read: {}", std::strerror(errno));
            ::close(fd);
            return false;
        }
        if (n == 0) break;
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > max) {
            err = fmt::format("larger than {} bytes", max);
            ::close(fd);
            return false;
        }
    }
    ::close(fd);
    return true;
}

}  // namespace

std::string render_snapshot(const DiscoverySnapshot& s) {
    Json j;
    j["kind"] = kKind;
    j["version"] = kVersion;
    j["written_unix"] = s.written_unix;
    j["ca_sha256"] = s.ca_sha256;
    Json eps = Json::array();
    for (const auto& e : s.endpoints) {
        Json ep;
        ep["address"] = e.str();
        auto z = s.zones.find(e.str());
        if (z != s.zones.end() && !z->second.empty()) ep["zone"] = z->second;
        eps.push_back(std::move(ep));
    }
    j["endpoints"] = std::move(eps);
    return json_dump(j) + "\n";
}

bool parse_snapshot(std::string_view text, DiscoverySnapshot& out, std::string& err) {
    if (text.size() > kMaxSnapshotBytes) {
        err = fmt::format("larger than {} bytes", kMaxSnapshotBytes);
        return false;
    }
    Json j;
    std::string jerr;
    if (!parse_json(text, j, jerr)) {
        err = "not JSON: " + jerr;
        return false;
    }
    if (!j.is_object() || !j.contains("kind") || j["kind"] != kKind) {
        err = fmt::format("not a {} document", kKind);
        return false;
    }
    if (!j.contains("version") || !j["version"].is_number_integer()) {
        err = "version missing or not an integer";
        return false;
    }
    const int64_t version = j["version"].get<int64_t>();
    if (version > kVersion) {
        err = fmt::format("version {} is newer than this kprism reads (1 to {}): written by a newer kprism", version,
                          kVersion);
        return false;
    }
    if (version < 1) {
        err = fmt::format("version {} is unknown (this kprism reads 1 to {})", version, kVersion);
        return false;
    }
    if (!j.contains("written_unix") || !j["written_unix"].is_number_integer() || !j.contains("ca_sha256") ||
        !j["ca_sha256"].is_string() || !j.contains("endpoints") || !j["endpoints"].is_array()) {
        err = "written_unix, ca_sha256 or endpoints missing or of the wrong type";
        return false;
    }
    DiscoverySnapshot s;
    s.checked = version >= 2;
    s.written_unix = j["written_unix"].get<int64_t>();
    if (s.written_unix < 0) {  // also keeps now - written_unix from overflowing
        err = fmt::format("written_unix {} is before 1970", s.written_unix);
        return false;
    }
    s.ca_sha256 = j["ca_sha256"].get<std::string>();
    if (j["endpoints"].size() > kMaxDiscovered) {
        err = fmt::format("{} endpoints, more than {}", j["endpoints"].size(), kMaxDiscovered);
        return false;
    }
    for (const auto& e : j["endpoints"]) {
        // Version 3: {"address": "ip:port", "zone": "..."}; before: "ip:port".
        const Json* addr = &e;
        std::string zone;
        if (version >= 3) {
            addr = nullptr;
            if (e.is_object() && e.contains("address")) addr = &e["address"];
            if (e.is_object() && e.contains("zone") && !e["zone"].is_null()) {
                const Json& z = e["zone"];
                std::string why = "not a string";
                if (!z.is_string() || !valid_zone(z.get_ref<const std::string&>(), why)) {
                    err = fmt::format("endpoint {}: zone {}", json_dump(e).substr(0, 80), why);
                    return false;
                }
                zone = z.get<std::string>();
            }
        }
        HostPort hp;
        std::string perr;
        if (!addr || !addr->is_string() || !parse_host_port(addr->get<std::string>(), hp, &perr) || !hp.is_ip) {
            err = fmt::format("endpoint {} is not an IP address with a port", json_dump(e).substr(0, 80));
            return false;
        }
        if (!zone.empty()) s.zones.emplace(hp.str(), std::move(zone));
        s.endpoints.push_back(std::move(hp));
    }
    out = std::move(s);
    return true;
}

bool load_snapshot(const std::string& path, const std::string& ca_sha256, int64_t max_age_s, int64_t now_unix,
                   DiscoverySnapshot& out, std::string& reason) {
    std::string text;
    if (!read_bounded(path, kMaxSnapshotBytes, text, reason)) return false;
    DiscoverySnapshot s;
    if (!parse_snapshot(text, s, reason)) return false;
    if (ca_sha256.empty() || s.ca_sha256 != ca_sha256) {
        reason = "written for another CA (ca_sha256 differs from health.ca_file's)";
        return false;
    }
    if (s.written_unix > now_unix + kSnapshotFutureSkewS) {
        reason = fmt::format("written {} s in the future", s.written_unix - now_unix);
        return false;
    }
    if (now_unix - s.written_unix > max_age_s) {
        reason = fmt::format("too old: written {} ago, more than discovery.snapshot_max_age {}",
                             format_duration(Duration{(now_unix - s.written_unix) * 1000}),
                             format_duration(Duration{max_age_s * 1000}));
        return false;
    }
    out = std::move(s);
    return true;
}

bool write_file_atomic(const std::string& path, std::string_view text, std::string& err) {
    const std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        err = fmt::format("cannot create {}: {}", tmp, std::strerror(errno));
        return false;
    }
    size_t off = 0;
    while (off < text.size()) {
        ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = fmt::format("cannot write {}: {}", tmp, std::strerror(errno));
            ::close(fd);
            ::unlink(tmp.c_str());
            return false;
        }
        off += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
        err = fmt::format("cannot fsync {}: {}", tmp, std::strerror(errno));
        ::close(fd);
        ::unlink(tmp.c_str());
        return false;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        err = fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
        ::unlink(tmp.c_str());
        return false;
    }
    std::string dir = path.substr(0, path.find_last_of('/') + 1);
    if (dir.empty()) dir = ".";
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);  // the rename itself on disk; a failure here leaves a correct file
        ::close(dfd);
    }
    return true;
}

std::string file_sha256_hex(const std::string& path) {
    std::string text, err;
    if (!read_bounded(path, 16u << 20, text, err)) return "";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr) != 1) return "";
    std::string hex;
    for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
    return hex;
}

}  // namespace kprism
