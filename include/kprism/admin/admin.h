// SPDX-License-Identifier: Apache-2.0
// The admin HTTP endpoint on health.bind_address:health.port: /healthz, /readyz, /metrics, /status.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kprism/admin/http_request.h"
#include "kprism/daemon/admin_endpoint.h"
#include "kprism/base/intrusive_list.h"

namespace kprism {

class Server;
class AdminConnection;

// One request, one response, then the connection closes. Responses are built in memory from the
// Server's state and written with uv_write: nothing here blocks the data path.
struct AdminResponse {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    bool allow = false;  // add "Allow: GET, HEAD" (405)
};
// The status line, headers and (unless `head_only`) the body, ready to write.
std::string serialize(const AdminResponse& r, bool head_only);

// Owned by the Server: start() after the data listeners, close() in its finish(). The listening
// handle is a member, closed without a callback and freed with the Admin after the loop has
// stopped; each AdminConnection frees itself in its last close callback and unlinks itself here,
// so the Admin must outlive the loop run (it does: the Server is destroyed after the loop returns).
class Admin final : public AdminEndpoint {
public:
    // Beyond, a new connection takes the place of an older one (AdminConnection::make_room, which
    // gives the order): idle ones first, those with a request waiting last, so a prober gets in.
    static constexpr size_t kMaxConnections = 64;
    static constexpr uint64_t kRequestTimeoutMs = 5000;  // the whole request head, from accept
    static constexpr uint64_t kLingerMs = 1000;        // reading what the client still sends after the answer
    // Silent this long after accept: idle (evicted first). Younger: a request is likely on its way.
    static constexpr uint64_t kIdleAfterMs = 200;

    explicit Admin(Server& srv) : srv_(srv) {}
    Admin(const Admin&) = delete;
    Admin& operator=(const Admin&) = delete;

    // The endpoint's life, as admin_endpoint.h describes it.
    int start(uv_loop_t* loop, const sockaddr* addr) override;
    int start_fd(uv_loop_t* loop, int fd) override;
    void close() override;
    const std::string& name() const override { return name_; }
    const uv_tcp_t* handle() const override { return open_ ? &tcp_ : nullptr; }
    size_t connections() const { return live_; }

    // The answer to a parsed request.
    AdminResponse route(const HttpRequest& req);

private:
    friend class AdminConnection;
    static void on_connection(uv_stream_t* s, int status);

    Server& srv_;
    uv_tcp_t tcp_{};
    bool open_ = false;
    std::string name_;
    IntrusiveList<AdminConnection> conns_;  // every connection until its last close callback
    size_t live_ = 0;                       // of those, not yet closing: at most kMaxConnections
};

}  // namespace kprism
