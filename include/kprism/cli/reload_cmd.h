// SPDX-License-Identifier: Apache-2.0
// `kprism reload`: makes a running kprism re-read its configuration and reports the outcome, for
// systemd's ExecReload= (so that `systemctl reload` fails when the new file is rejected).
#pragma once

#include "kprism/config/config.h"

namespace kprism {

// Finds the daemon's admin endpoint from health.bind_address/health.port (like `kprism status`),
// reads its pid and reload generation from /status, checks --pid (without --pid: that /proc shows
// the pid is kprism holding the admin endpoint's listening socket, process_identity.h), sends it
// SIGHUP through a pidfd, then polls /status every kReloadPollMs until the generation moves or
// --timeout (30 s) passes. Prints one
// line: "kprism reload: configuration reloaded: CHANGES" (stdout) or "kprism reload: reload failed;
// the old configuration keeps serving: ERROR" (stderr).
//
// Exit status:
//   0  reloaded: the daemon applied the file.
//   1  rejected: the daemon refused the file (or the file does not even load here, and nothing
//      was sent); the running configuration stays in force.
//   2  no answer from the admin endpoint, an answer that is not a kprism /status (or one without
//      reload reporting), --pid not the daemon's pid, without --pid a pid not shown to be kprism
//      holding the admin socket (or /proc unreadable), the signal could not be sent, the daemon
//      exited meanwhile, or an invalid command line.
//   3  SIGHUP was sent but no outcome was reported within --timeout.
constexpr int kReloadOk = 0, kReloadRejected = 1, kReloadError = 2, kReloadTimeout = 3;
constexpr int kReloadPollMs = 50;
int reload_command(const CommandLine& cl);

}  // namespace kprism
