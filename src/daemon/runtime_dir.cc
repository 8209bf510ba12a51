// SPDX-License-Identifier: Apache-2.0
// Publishing the admin address in the runtime directory, and reading it back for the commands.
#include "kprism/daemon/runtime_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kprism/base/address.h"

namespace kprism::runtime {

namespace {
std::string file_in(const std::string& dir) { return dir + "/" + kAdminAddressFile; }
}  // namespace

std::string directory() {
    const char* env = std::getenv("RUNTIME_DIRECTORY");
    if (!env || !*env) return "";
    std::string dirs = env;
    return dirs.substr(0, dirs.find(':'));  // systemd lists every RuntimeDirectory=, colon-separated
}

bool publish_admin_address(const std::string& address, std::string& error) {
    std::string dir = directory();
    if (dir.empty()) return true;
    std::string path = file_in(dir), tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::string line = address + "\n";
    bool ok = fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    int err = errno;
    if (fd >= 0) ::close(fd);
    if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        ::unlink(tmp.c_str());
        error = path + ": " + std::strerror(err);
    }
    return ok;
}

void withdraw_admin_address() {
    std::string dir = directory();
    if (!dir.empty()) ::unlink(file_in(dir).c_str());
}

std::optional<std::string> published_admin_address(std::string* from) {
    std::string dir = directory();
    std::string path = file_in(dir.empty() ? kDefaultDirectory : dir);
    std::ifstream f(path);
    std::string line;
    if (!f || !std::getline(f, line) || line.size() > 64) return std::nullopt;
    HostPort hp;
    if (!parse_host_port(line, hp, nullptr) || !hp.is_ip) return std::nullopt;
    if (from) *from = path;
    return line;
}

}  // namespace kprism::runtime
