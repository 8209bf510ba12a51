// SPDX-License-Identifier: Apache-2.0
// The admin address a running kprism publishes in its runtime directory, so that `kprism status`
// and `kprism reload` reach the admin endpoint where it really listens: also on a socket systemd
// passed (kprism-admin.socket moved by a drop-in), and after an edit of health.port that waits
// for a restart.
#pragma once

#include <optional>
#include <string>

namespace kprism::runtime {

// The daemon's runtime directory: the first path of $RUNTIME_DIRECTORY (systemd's
// RuntimeDirectory=kprism sets it for ExecStart= and ExecReload= alike), or "" without one.
std::string directory();
constexpr const char* kAdminAddressFile = "admin-address";  // one line: "127.0.0.1:7446"
constexpr const char* kDefaultDirectory = "/run/kprism";    // what kprism.service's RuntimeDirectory= makes

// Daemon side. Writes `address` to DIR/admin-address (temporary file, then rename); true and no
// file without a runtime directory. withdraw_admin_address() removes it (at exit).
bool publish_admin_address(const std::string& address, std::string& error);
void withdraw_admin_address();

// Command side: the published address, from $RUNTIME_DIRECTORY or else kDefaultDirectory; nullopt
// when there is none (no file, unreadable, or not one host:port line). `*from` names the file.
std::optional<std::string> published_admin_address(std::string* from = nullptr);

}  // namespace kprism::runtime
