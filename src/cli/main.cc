// SPDX-License-Identifier: Apache-2.0
// Entry point: command line, `check`, and running the daemon until it has drained.
#include <fmt/format.h>
#include <signal.h>
#include <uv.h>

#include <cstdio>

#include "kprism/config/config.h"
#include "kprism/admin/admin.h"
#include "kprism/base/log.h"
#include "kprism/cli/reload_cmd.h"
#include "kprism/daemon/server.h"
#include "kprism/cli/status_cmd.h"
#include "kprism/base/version.h"

using namespace kprism;

namespace {

constexpr int kExitConfig = 1;   // invalid command line or configuration
constexpr int kExitStartup = 2;  // valid configuration, but the daemon could not start

void print_errors(const std::vector<std::string>& errors) {
    for (const auto& e : errors) fmt::print(stderr, "kprism: {}\n", e);
}

int run(const Config& cfg, const CommandLine& cl, int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);  // until the Server handles it (restart in place), it must not kill the daemon
    uv_loop_t loop;
    uv_loop_init(&loop);
    int rc = 0;
    {
        // SIGHUP re-reads the same file with the same flags on top.
        Server server(
            &loop, cfg, [](Server& s) { return std::make_unique<Admin>(s); },
            [&cl](Config& next, std::vector<std::string>& errors) { return load_config(cl, next, errors); });
        server.handoff().set_command_line(argc, argv);
        std::string err;
        if (!server.start(err)) {
            log::error("startup failed", {{"error", err}});
            rc = kExitStartup;
        }
        // On failure this only runs the close callbacks of what start() opened.
        server.splice_poll().run(&loop);
        if (rc == 0) rc = server.handoff().exit_code();
    }
    if (int r = uv_loop_close(&loop); r != 0) log::error("event loop closed with open handles", {{"error", uv_strerror(r)}});
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    CommandLine cl;
    std::vector<std::string> errors;
    if (!parse_command_line(argc, argv, cl, errors)) {
        print_errors(errors);
        fmt::print(stderr, "kprism: see 'kprism --help'\n");
        if (cl.command == Command::reload) return kReloadError;
        return cl.command == Command::status ? kStatusError : kExitConfig;
    }
    if (cl.command == Command::help) {
        fmt::print("{}", usage_text());
        return 0;
    }
    if (cl.command == Command::version) {
        fmt::print("kprism {}\n", kVersion);
        return 0;
    }
    if (cl.command == Command::status) return status_command(cl);
    if (cl.command == Command::reload) return reload_command(cl);
    Config cfg;
    if (!load_config(cl, cfg, errors)) {
        print_errors(errors);
        return kExitConfig;
    }
    log::set_level(cfg.log_level);
    log::set_format(cfg.log_format);
    if (cl.command == Command::check) {
        fmt::print("{}", render_config(cfg));
        fmt::print(stderr, "kprism: configuration is valid{}\n",
                   cfg.config_file.empty() ? "" : fmt::format(" ({})", cfg.config_file));
        return 0;
    }
    log::info("kprism starting", {{"version", kVersion}, {"pid", static_cast<int64_t>(getpid())}});
    return run(cfg, cl, argc, argv);
}
