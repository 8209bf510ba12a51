// SPDX-License-Identifier: Apache-2.0
// The record a restarting kprism leaves beside its sockets in systemd's fd store: which client
// socket pairs with which upstream socket, to which upstream, in what half-closed state.
//
// Text, one line per connection, versioned and bounded (see record.cc for the format). The
// sockets themselves travel as descriptors; a line names its two sockets by their addresses
// (getsockname/getpeername), which identify a TCP connection, so the order in which systemd
// passes the descriptors back does not matter.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/sd_notify.h"
#include "kprism/upstreams/credentials.h"
#include "kprism/upstreams/upstream.h"

namespace kprism::handover {

// The names under which the descriptors are stored (FDNAME=): listening sockets, the AF_UNIX
// socket whose queue carries the connection sockets (pack_fds), and the memfd holding the record.
inline constexpr std::string_view kListenerName = "handover-data";
inline constexpr std::string_view kConnectionName = "handover-conn";
inline constexpr std::string_view kStateName = "handover-state";
// The health record (below), beside the handover record: its own descriptor, so that an older
// kprism, which does not know it, still takes the connections (it closes a descriptor it does not
// know) and a newer one reading an older handover finds no health.
inline constexpr std::string_view kHealthName = "handover-health";
// Also the crash copy's names below: everything a next process takes back.
bool is_handover_name(std::string_view name);

// Crash survival (keep_on_crash, crash_copy.cc): a standing copy of the listeners, of the
// connection sockets (in a carrier, as above) and of the record, replaced whenever connections
// come or go. A copy is stored under generation 0 or 1 and the other one removed after it, so a
// crash at any moment leaves at least one whole copy in the store.
inline constexpr std::string_view kCrashListenerName = "crash-data";
inline constexpr std::string_view kCrashPrefix = "crash-";
inline constexpr std::string_view kCrashStatePrefix = "crash-state-";
std::string crash_connection_name(unsigned generation);  // crash-conn-0, crash-conn-1
std::string crash_state_name(unsigned generation);       // crash-state-0, crash-state-1
// The crash copy's health record: one memfd stored once, rewritten in place every second.
inline constexpr std::string_view kCrashHealthName = "crash-health";
std::vector<std::string> crash_names();                  // all six

// `fds` sent as SCM_RIGHTS into a new AF_UNIX stream socket pair, kMaxFdsPerMessage (an even
// number, so the two sockets of a pair stay together) per message and
// in order; the sending end is closed and the receiving end returned, its queue holding them (the
// kernel keeps descriptors in flight open). `sent` says how many went in; on a failure part way
// (the socket's buffer, the in-flight limit of RLIMIT_NOFILE) `error` says why, and the receiving
// end is still returned unless nothing went in (then -1).
int pack_fds(const std::vector<int>& fds, size_t& sent, std::string& error);
// Every descriptor queued on `carrier`, in order, close-on-exec; `truncated` when the kernel
// dropped some (this process's descriptor limit). Nothing when `carrier` is not an AF_UNIX socket.
std::vector<int> unpack_fds(int carrier, bool& truncated);

// Restart in place (SIGUSR2, no fd store): the old process moves the descriptors to 3, 4, ...
// in this order, listeners, the carrier of the connection sockets, the record, and execs the new
// executable with KPRISM_HANDOVER=<listeners>,<carriers>,<records> in its environment.
inline constexpr std::string_view kInheritEnv = "KPRISM_HANDOVER";
std::string inherit_value(size_t listeners, size_t carriers, size_t records);
// The health record travels as one more descriptor, the next after those, named by
// KPRISM_HANDOVER_HEALTH=<fd>: an older kprism ignores the variable (and the descriptor).
inline constexpr std::string_view kInheritHealthEnv = "KPRISM_HANDOVER_HEALTH";
// In the new process: the descriptors named by $KPRISM_HANDOVER (and $KPRISM_HANDOVER_HEALTH), with
// their names, marked close-on-exec; the variables are removed. A health descriptor that is not
// the one right after the others, or not open, is left alone (no health is carried). Empty without it; empty with *error set when it is
// malformed, too large, or names a descriptor that is not open (none is taken then).
std::vector<notify::ListenFd> inherited_fds(std::string* error);

inline constexpr size_t kMaxRecordBytes = 16 << 20;  // 65536 entries of at most ~250 bytes
inline constexpr size_t kMaxEntries = 65536;
inline constexpr size_t kMaxTokenBytes = 300;  // an address or an upstream name

// One handed-over connection. Addresses as sockaddr_str prints them ("127.0.0.1:7445",
// "[::1]:6443").
struct Entry {
    std::string client_local, client_peer;      // the client's socket: kprism's end, the client's end
    std::string upstream_local, upstream_peer;  // the upstream socket: kprism's end, the apiserver's
    std::string upstream;                       // the Upstream's name (its address as configured)
    bool client_eof = false;                    // the client sent FIN (passed on to the upstream)
    bool client_shut = false;                   // kprism sent FIN to the client
    bool upstream_eof = false;
    bool upstream_shut = false;
    uint64_t age_ms = 0;                        // how long the connection had been open
};

std::string serialize(const std::vector<Entry>& entries);
// A new memfd (close-on-exec) holding `text`, or -1 with `error` set.
int record_memfd(const std::string& text, std::string& error);

// The whole record or nothing: false with a reason (another version, a bad line, truncated: no
// matching `end` line) and `out` empty.
bool parse(std::string_view text, std::vector<Entry>& out, std::string& error);
// The entries of several records (the crash copy's two generations, when a crash came between
// storing one and removing the other), each connection (its client socket) once, in order. A
// record that does not parse is left out, and `error` says why.
std::vector<Entry> merge(const std::vector<std::string>& records, std::string& error);

// The health record: what the control plane knew of each upstream when the record was written,
// so that a restart changes no routing decision (ControlPlane::carry_health, restore_health).
// Text, versioned and bounded like the handover record:
//
//   kprism-health 1
//   at <CLOCK_BOOTTIME ms when written>
//   node <credentials: unknown|ok|rejected> <flags: 1 failing_open, 2 etcd_quorum_lost>
//   tls <SHA-256 of each TLS file in use (cert, key, CA), hex>   (only with a certificate loaded)
//   up <name> <health> <last_result|-> <rises> <falls> <down_reason> <flags> <result_age_ms>
//      <last_change_unix> <failing checks, comma separated|-> <more> <last_error, %-escaped|->
//   end <number of lines between the header and this one> <FNV-1a 64 of the text before it, hex>
//
// up flags: 1 has_result, 2 passed_check, 4 closes held (down for etcd). A line of another kind,
// or one that does not parse, is ignored (a later version may add some); a record without its
// header, or whose end line does not add up (torn, truncated, altered, another version), is
// ignored whole.
inline constexpr std::string_view kHealthHeader = "kprism-health 1";
inline constexpr size_t kMaxHealthEntries = kMaxUpstreams;
inline constexpr size_t kMaxHealthBytes = 1 << 20;
inline constexpr size_t kMaxErrorBytes = 512;  // of the error, before escaping

struct UpstreamHealth {
    std::string name;  // Upstream::name: the address, or HOST@ADDRESS:PORT
    Health health = Health::unknown;
    bool has_result = false;
    CheckResult last_result = CheckResult::ready;
    uint32_t rises = 0, falls = 0;
    DownReason down_reason = DownReason::other;
    bool passed_check = false;
    bool close_held = false;       // down for etcd, its closes waiting for the others' checks
    uint64_t result_age_ms = 0;    // since its last result, when written
    int64_t last_change_unix = 0;
    FailingChecks failing_checks;
    std::string last_error;
};

struct HealthRecord {
    uint64_t at_ms = 0;  // CLOCK_BOOTTIME (shared by every process of this boot, counts suspend)
    CredentialsState credentials = CredentialsState::unknown;
    bool failing_open = false;
    bool etcd_quorum_lost = false;
    // The content of the TLS files in use (TlsClientContext::content_hex; "" none): a certificate
    // rejected before the restart is rejected after it only if it is the same one.
    std::string tls_content;
    std::vector<UpstreamHealth> upstreams;
};

// CLOCK_BOOTTIME in ms.
uint64_t boottime_ms();
std::string serialize_health(const HealthRecord& r);
// The end line's checksum: FNV-1a 64 of everything before it. A record torn by a crash while the
// crash copy rewrote it in place (a new beginning over an old end) does not add up.
uint64_t health_checksum(std::string_view text_before_end);
// false with a reason when the record is not one (no header, no matching end line, too large).
bool parse_health(std::string_view text, HealthRecord& out, std::string& error);

// The local or peer address of a socket as sockaddr_str prints it; empty when it has none.
std::string local_address(int fd);
std::string peer_address(int fd);

}  // namespace kprism::handover
