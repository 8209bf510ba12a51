// SPDX-License-Identifier: Apache-2.0
// Integration-test harness: run the real kprism binary, real loopback servers, poll with deadlines.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace it {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// `timeout` times KPRISM_TEST_TIME_SCALE (a whole number, default 1; `make test-arm64` sets it for
// binaries under emulation). Every deadline of the harness below goes through it.
std::chrono::milliseconds scaled(std::chrono::milliseconds timeout);

// Polls `cond` every few milliseconds until it holds or `timeout` (scaled) passes.
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 5000ms);

// A loopback TCP port that was free a moment ago.
int free_port();

// A loopback TCP port that refuses connections for the rest of this process: bound and never
// listening, so that no other process (a server of another test shard) can take it meanwhile.
int refused_port();

std::string kprism_bin();
std::string standin_bin();

// What a child gets besides its argv, set up between fork and exec: environment entries
// ("NAME=value", replacing an inherited NAME; "{pid}" in a value becomes the child's own pid, as
// systemd's LISTEN_PID and WATCHDOG_PID must be) and fds passed as 3, 4, ... (socket activation).
struct Spawn {
    std::vector<std::string> env;
    std::vector<int> fds;
};

// A child process with stdout+stderr captured to a file.
class Process {
public:
    Process() = default;
    explicit Process(std::vector<std::string> argv) : Process(std::move(argv), Spawn{}) {}
    Process(std::vector<std::string> argv, Spawn spawn);
    ~Process();
    Process(Process&&) noexcept;
    Process& operator=(Process&&) noexcept;

    pid_t pid() const { return pid_; }
    std::string output() const;
    bool wait_output(const std::string& needle, std::chrono::milliseconds timeout = 5000ms) const;
    size_t count_output(const std::string& needle) const;
    void signal(int sig) const;
    // Waits for exit; returns the exit code, 128+signal if killed, -1 on timeout.
    int wait(std::chrono::milliseconds timeout = 10000ms);
    bool running();

private:
    pid_t pid_ = -1;
    std::string out_path_;
    int status_ = -1;
};

// Runs a command to completion; returns exit code and output.
struct Result {
    int code;
    std::string output;
};
Result run(std::vector<std::string> argv, std::chrono::milliseconds timeout = 10000ms);

// Blocks SIGPIPE in the calling thread: OpenSSL writes with write(2), which raises it against a
// peer that has gone (a pending thread-directed SIGPIPE dies with its thread).
void block_sigpipe();

// A configuration file in /tmp, removed with the object; write() replaces it whole (a rename),
// so a reload never reads half a file.
struct ConfigFile {
    ConfigFile();
    ~ConfigFile();
    ConfigFile(const ConfigFile&) = delete;
    ConfigFile& operator=(const ConfigFile&) = delete;
    void write(const std::string& text);
    std::string path;
};

// kprism on a free port in front of `endpoints`, started and waited for.
class Kprism : public Process {
public:
    Kprism(const std::vector<std::string>& endpoints, std::vector<std::string> extra = {})
        : Kprism(endpoints, std::move(extra), free_port(), free_port()) {}
    Kprism(const std::vector<std::string>& endpoints, std::vector<std::string> extra, int port, int admin_port)
        : Kprism(endpoints, std::move(extra), Spawn{}, port, admin_port) {}
    // The same with extra environment and passed fds (see Spawn).
    Kprism(const std::vector<std::string>& endpoints, std::vector<std::string> extra, Spawn spawn)
        : Kprism(endpoints, std::move(extra), std::move(spawn), free_port(), free_port()) {}
    Kprism(const std::vector<std::string>& endpoints, std::vector<std::string> extra, Spawn spawn, int port,
           int admin_port);
    int port;
    int admin_port;
    // Logs a stats line (SIGUSR1) and returns the value of `key` from the newest one.
    long stat(const std::string& key);
};

// An in-process TCP server on 127.0.0.1 (or ::1) that runs `handler(fd)` on a thread per
// connection. The handler owns nothing: the server closes the fd after it returns.
class TcpServer {
public:
    using Handler = std::function<void(int fd)>;
    explicit TcpServer(Handler h, bool ipv6 = false, int backlog = 128);
    ~TcpServer();
    int port() const { return port_; }
    std::string endpoint() const;
    int accepted() const { return accepted_; }
    void stop();  // stops accepting and closes the listening socket; live handlers go on

    static void echo(int fd);

private:
    void loop();
    int listen_fd_ = -1;
    int port_ = 0;
    bool ipv6_;
    Handler handler_;
    std::atomic<int> accepted_{0};
    std::atomic<bool> stopping_{false};
    std::thread thread_;
    std::mutex mu_;
    std::vector<std::thread> workers_;
    std::vector<int> fds_;
};

// Blocking client helpers. connect_to returns -1 on failure.
int connect_to(int port, bool ipv6 = false);
bool send_all(int fd, const void* p, size_t n);
// Reads exactly n bytes unless EOF/error first; returns bytes read.
size_t recv_exact(int fd, void* p, size_t n, std::chrono::milliseconds timeout = 10000ms);
// Reads until EOF (or error); returns data; sets *err to errno of the error (0 on clean EOF).
std::string recv_until_eof(int fd, int* err = nullptr, std::chrono::milliseconds timeout = 10000ms);
// One "ping" round trip over a new connection to an echo service; false on any failure.
bool echo_ok(int port);
// A reply to one small HTTP request sent over a new connection.
std::string http_get(int port, const std::string& path = "/");
// The body of an HTTP reply (after the blank line), or "" if it has none.
std::string body_of(const std::string& reply);
// No EOF or error pending on a client socket: its peer (kprism) has not closed it.
bool still_open(int fd);

// The resident set of process `pid` in KiB (VmRSS in /proc/PID/status); -1 if it cannot be read.
long rss_kib(pid_t pid);

// Deterministic pseudo-random byte stream for end-to-end checks.
void fill_pattern(uint64_t seed, uint64_t offset, unsigned char* p, size_t n);

}  // namespace it
