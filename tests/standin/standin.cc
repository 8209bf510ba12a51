// kprism-standin: a stand-in apiserver for tests and the demo. Plain TCP for now: answers HTTP/1.1
// requests with "served by NAME" (keep-alive), or echoes bytes back (--mode echo).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "kprism/address.h"

namespace {

std::string g_name = "standin";
bool g_echo = false;

bool write_all(int fd, const char* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

void serve(int fd) {
    char buf[16384];
    std::string pending;
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (g_echo) {
            if (!write_all(fd, buf, static_cast<size_t>(n))) break;
            continue;
        }
        pending.append(buf, static_cast<size_t>(n));
        if (pending.size() > 65536) break;
        size_t end;
        bool close_after = false;
        while ((end = pending.find("\r\n\r\n")) != std::string::npos) {
            std::string head = pending.substr(0, end);
            pending.erase(0, end + 4);
            std::string path = "/";
            if (size_t sp = head.find(' '); sp != std::string::npos)
                path = head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
            for (auto& ch : head) ch = static_cast<char>(tolower(ch));
            close_after = head.find("connection: close") != std::string::npos;
            std::string body = fmt::format("served by {} path {}\n", g_name, path);
            std::string resp = fmt::format(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Served-By: {}\r\n{}\r\n{}",
                body.size(), g_name, close_after ? "Connection: close\r\n" : "", body);
            if (!write_all(fd, resp.data(), resp.size()) || close_after) break;
        }
        if (close_after) break;
    }
    ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    std::string listen = "127.0.0.1:0";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--listen") listen = next();
        else if (a == "--name") g_name = next();
        else if (a == "--mode") g_echo = next() == "echo";
        else {
            fmt::print(stderr, "usage: kprism-standin --listen HOST:PORT [--name NAME] [--mode http|echo]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    kprism::HostPort hp;
    std::string err;
    if (!kprism::parse_host_port(listen, hp, &err) && listen.substr(listen.rfind(':')) != ":0") {
        fmt::print(stderr, "kprism-standin: {}\n", err);
        return 2;
    }
    std::string host = listen.substr(0, listen.rfind(':'));
    int port = std::stoi(listen.substr(listen.rfind(':') + 1));
    sockaddr_storage ss;
    if (!kprism::ip_to_sockaddr(host, static_cast<uint16_t>(port), ss)) {
        fmt::print(stderr, "kprism-standin: bad listen address {}\n", listen);
        return 2;
    }
    int fd = ::socket(ss.ss_family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), kprism::sockaddr_len(reinterpret_cast<sockaddr*>(&ss))) != 0 ||
        ::listen(fd, 1024) != 0) {
        fmt::print(stderr, "kprism-standin: cannot listen on {}: {}\n", listen, strerror(errno));
        return 1;
    }
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    fmt::print("listening {} name={}\n", kprism::sockaddr_str(reinterpret_cast<sockaddr*>(&ss)), g_name);
    fflush(stdout);
    for (;;) {
        int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            usleep(10000);
            continue;
        }
        std::thread(serve, c).detach();
    }
}
