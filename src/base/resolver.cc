// SPDX-License-Identifier: Apache-2.0
// Name resolution with c-ares driven by the libuv loop: a channel per resolution, its sockets
// watched by uv_poll handles and its timeouts (and the whole resolution's deadline) by a uv_timer;
// the answer parsed by c-ares only, deduplicated, ordered and capped here.
#include "kprism/base/resolver.h"

#include <ares.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace kprism {

const char* resolve_error_name(ResolveError e) {
    switch (e) {
    case ResolveError::none: return "none";
    case ResolveError::no_such_name: return "no_such_name";
    case ResolveError::no_address: return "no_address";
    case ResolveError::timeout: return "timeout";
    case ResolveError::failed: return "failed";
    }
    return "failed";
}

// One resolution. Owned by Resolver::queries_ until the close callback of its last handle (the
// timer, then each poll handle c-ares asked for).
struct Resolver::Query {
    struct Poll {
        uv_poll_t h{};
        Query* q = nullptr;
        int fd = -1;
    };
    Resolver* owner = nullptr;
    uint64_t id = 0;
    Callback done;
    ares_channel channel = nullptr;
    uv_timer_t timer{};
    uint64_t deadline_ms = 0;  // loop time
    std::vector<Poll*> polls;  // one per socket c-ares has open; each freed from its close callback
    size_t open_handles = 0;   // handles whose close callback has not run yet
    bool answered = false;     // `result` holds the outcome; the timer delivers it
    bool cancelled = false;    // `done` is never called
    bool shutting = false;     // the channel is gone and every handle is closing
    ResolveResult result;
};

namespace {

// c-ares keeps a process-wide reference count; on Linux this does no more than count.
void library_init() {
    static const int status = ares_library_init(ARES_LIB_INIT_ALL);
    (void)status;
}

bool address_less(const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family) return a.ss_family == AF_INET;
    if (a.ss_family == AF_INET) {
        const auto& x = reinterpret_cast<const sockaddr_in&>(a);
        const auto& y = reinterpret_cast<const sockaddr_in&>(b);
        return std::memcmp(&x.sin_addr, &y.sin_addr, sizeof x.sin_addr) < 0;
    }
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    int c = std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr);
    return c < 0 || (c == 0 && x.sin6_scope_id < y.sin6_scope_id);
}

bool address_equal(const sockaddr_storage& a, const sockaddr_storage& b) {
    return !address_less(a, b) && !address_less(b, a);
}

// The answer's addresses: IPv4 and IPv6 only, port 0, distinct, ordered, at most `max`.
void collect(const ares_addrinfo* res, size_t max, ResolveResult& out) {
    std::vector<sockaddr_storage> all;
    for (const ares_addrinfo_node* n = res ? res->nodes : nullptr; n; n = n->ai_next) {
        sockaddr_storage ss{};
        if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(sockaddr_in)) {
            std::memcpy(&ss, n->ai_addr, sizeof(sockaddr_in));
            reinterpret_cast<sockaddr_in&>(ss).sin_port = 0;
        } else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(sockaddr_in6)) {
            std::memcpy(&ss, n->ai_addr, sizeof(sockaddr_in6));
            auto& v6 = reinterpret_cast<sockaddr_in6&>(ss);
            v6.sin6_port = 0;
            v6.sin6_flowinfo = 0;
            if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {  // ::ffff:a.b.c.d is a.b.c.d: one address, not two
                sockaddr_in v4{};
                v4.sin_family = AF_INET;
                std::memcpy(&v4.sin_addr, &v6.sin6_addr.s6_addr[12], 4);
                ss = sockaddr_storage{};
                std::memcpy(&ss, &v4, sizeof v4);
            }
        } else {
            continue;
        }
        all.push_back(ss);
    }
    std::sort(all.begin(), all.end(), address_less);
    all.erase(std::unique(all.begin(), all.end(), address_equal), all.end());
    out.total = all.size();
    if (all.size() > max) all.resize(max);
    out.addresses = std::move(all);
}

ResolveError error_of(int status) {
    switch (status) {
    case ARES_ENOTFOUND: return ResolveError::no_such_name;
    case ARES_ENODATA: return ResolveError::no_address;
    case ARES_ETIMEOUT: return ResolveError::timeout;
    default: return ResolveError::failed;
    }
}

}  // namespace

Resolver::Resolver(uv_loop_t* loop, Options opts) : loop_(loop), opts_(std::move(opts)) { library_init(); }

Resolver::~Resolver() = default;

uint64_t Resolver::resolve(const std::string& host, Callback done, std::string& error) {
    if (closed_) {
        error = "resolver closed";
        return 0;
    }
    auto q = std::make_unique<Query>();
    q->owner = this;
    q->id = next_id_++;
    q->done = std::move(done);
    ares_options o{};
    o.sock_state_cb = on_sock_state;
    o.sock_state_cb_data = q.get();
    o.timeout = static_cast<int>(std::max<uint64_t>(100, opts_.timeout_ms / 4));
    o.tries = 3;
    if (int r = ares_init_options(&q->channel, &o, ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
        r != ARES_SUCCESS) {
        error = ares_strerror(r);
        return 0;
    }
    if (!opts_.servers.empty()) {
        if (int r = ares_set_servers_ports_csv(q->channel, opts_.servers.c_str()); r != ARES_SUCCESS) {
            error = std::string("DNS servers '") + opts_.servers + "': " + ares_strerror(r);
            ares_destroy(q->channel);
            return 0;
        }
    }
    uv_timer_init(loop_, &q->timer);
    q->timer.data = q.get();
    q->open_handles = 1;
    q->deadline_ms = uv_now(loop_) + opts_.timeout_ms;
    Query& ref = *q;
    queries_.push_back(std::move(q));
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = ARES_AI_NOSORT;  // ordered here; c-ares's RFC 6724 sort opens a socket per address
    // May answer at once (/etc/hosts, a malformed name): on_addrinfo then only arms the timer.
    ares_getaddrinfo(ref.channel, host.c_str(), nullptr, &hints, on_addrinfo, &ref);
    arm(ref);
    return ref.id;
}

void Resolver::cancel(uint64_t id) {
    for (auto& q : queries_)
        if (q->id == id && !q->shutting) {
            q->cancelled = true;
            shut(*q);
        }
}

void Resolver::close() {
    closed_ = true;
    // shut() never adds or removes queries: the vector is stable here.
    for (auto& q : queries_)
        if (!q->shutting) {
            q->cancelled = true;
            shut(*q);
        }
}

// c-ares opened, changed or is about to close one of its sockets.
void Resolver::on_sock_state(void* data, int fd, int readable, int writable) {
    auto* q = static_cast<Query*>(data);
    auto it = std::find_if(q->polls.begin(), q->polls.end(), [fd](const Query::Poll* p) { return p->fd == fd; });
    if (!readable && !writable) {
        if (it == q->polls.end()) return;
        // Stopped now, before c-ares closes the descriptor; freed from the close callback.
        uv_close(reinterpret_cast<uv_handle_t*>(&(*it)->h), on_poll_closed);
        q->polls.erase(it);
        return;
    }
    Query::Poll* p = nullptr;
    if (it != q->polls.end()) {
        p = *it;
    } else {
        p = new Query::Poll;
        p->q = q;
        p->fd = fd;
        if (uv_poll_init_socket(q->owner->loop_, &p->h, fd) != 0) {
            delete p;
            if (!q->answered) {
                q->result = ResolveResult{};
                q->result.error = ResolveError::failed;
                q->result.detail = "cannot watch the resolver's socket";
                q->answered = true;
                uv_timer_start(&q->timer, on_timer, 0, 0);
            }
            return;
        }
        p->h.data = p;
        q->polls.push_back(p);
        ++q->open_handles;
    }
    uv_poll_start(&p->h, (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0), on_poll);
}

void Resolver::on_poll(uv_poll_t* h, int status, int events) {
    auto* p = static_cast<Query::Poll*>(h->data);
    Query* q = p->q;
    if (q->shutting) return;
    // An error on the socket: let c-ares read and write it, to find out and move on.
    const bool rd = status < 0 || (events & UV_READABLE);
    const bool wr = status < 0 || (events & UV_WRITABLE);
    ares_process_fd(q->channel, rd ? p->fd : ARES_SOCKET_BAD, wr ? p->fd : ARES_SOCKET_BAD);
    q->owner->arm(*q);
}

void Resolver::on_addrinfo(void* arg, int status, int, ares_addrinfo* res) {
    auto* q = static_cast<Query*>(arg);
    if (!q->shutting && !q->answered) {
        ResolveResult& r = q->result;
        if (status == ARES_SUCCESS) {
            collect(res, q->owner->opts_.max_addresses, r);
            if (r.addresses.empty()) {
                r.error = ResolveError::no_address;
                r.detail = "no IPv4 or IPv6 address";
            }
        } else {
            r.error = error_of(status);
            r.detail = ares_strerror(status);
        }
        q->answered = true;
        // Delivered from the timer, outside c-ares: the user may then cancel, close or resolve again.
        uv_timer_start(&q->timer, on_timer, 0, 0);
    }
    if (res) ares_freeaddrinfo(res);
}

void Resolver::on_timer(uv_timer_t* t) {
    auto* q = static_cast<Query*>(t->data);
    if (q->shutting) return;
    if (!q->answered && uv_now(q->owner->loop_) >= q->deadline_ms) {
        q->result = ResolveResult{};
        q->result.error = ResolveError::timeout;
        q->result.detail = "no answer within " + std::to_string(q->owner->opts_.timeout_ms) + " ms";
        q->answered = true;
    }
    if (q->answered) {
        q->owner->finish(*q);
        return;
    }
    ares_process_fd(q->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // c-ares's own timeouts
    q->owner->arm(*q);
}

// The timer: at once when answered, else at c-ares's next timeout or the deadline, whichever first.
void Resolver::arm(Query& q) {
    if (q.shutting) return;
    const uint64_t now = uv_now(loop_);
    if (q.answered || now >= q.deadline_ms) {
        uv_timer_start(&q.timer, on_timer, 0, 0);
        return;
    }
    const uint64_t left = q.deadline_ms - now;
    timeval max{static_cast<time_t>(left / 1000), static_cast<suseconds_t>((left % 1000) * 1000)}, tv{};
    timeval* next = ares_timeout(q.channel, &max, &tv);
    uint64_t ms = static_cast<uint64_t>(next->tv_sec) * 1000 + (static_cast<uint64_t>(next->tv_usec) + 999) / 1000;
    uv_timer_start(&q.timer, on_timer, std::min(ms, left), 0);
}

void Resolver::finish(Query& q) {
    Callback done = std::move(q.done);
    const bool deliver = !q.cancelled;
    ResolveResult r = std::move(q.result);
    shut(q);  // before `done`, which may cancel or close
    if (deliver && done) done(r);
}

void Resolver::shut(Query& q) {
    if (q.shutting) return;
    q.shutting = true;
    // Calls on_addrinfo (ignored now) for an unanswered query and on_sock_state(fd, 0, 0) for each
    // open socket, which closes its poll handle before c-ares closes the descriptor.
    if (q.channel) ares_destroy(q.channel);
    q.channel = nullptr;
    for (Query::Poll* p : q.polls)  // c-ares reported every close above; nothing is left here
        uv_close(reinterpret_cast<uv_handle_t*>(&p->h), on_poll_closed);
    q.polls.clear();
    uv_close(reinterpret_cast<uv_handle_t*>(&q.timer), on_timer_closed);
}

void Resolver::on_poll_closed(uv_handle_t* h) {
    auto* p = static_cast<Query::Poll*>(h->data);
    Query* q = p->q;
    delete p;
    q->owner->handle_closed(*q);
}

void Resolver::on_timer_closed(uv_handle_t* h) {
    auto* q = static_cast<Query*>(h->data);
    q->owner->handle_closed(*q);
}

void Resolver::handle_closed(Query& q) {
    if (--q.open_handles != 0) return;
    auto it = std::find_if(queries_.begin(), queries_.end(), [&q](const auto& p) { return p.get() == &q; });
    if (it == queries_.end()) return;
    std::swap(*it, queries_.back());
    queries_.pop_back();
}

}  // namespace kprism
