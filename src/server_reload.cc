// Live reload (SIGHUP): the new configuration is loaded and validated whole, new listeners are
// bound, and only then is anything changed; a failure at either step keeps the old one in force.
#include <fmt/format.h>

#include <algorithm>

#include "kprism/connection.h"
#include "kprism/log.h"
#include "kprism/sd_notify.h"
#include "kprism/random.h"
#include "kprism/server.h"

namespace kprism {

namespace {
std::string addr_str(const sockaddr_storage& ss) { return sockaddr_str(reinterpret_cast<const sockaddr*>(&ss)); }
}  // namespace

void Server::reload() {
    if (draining_ || finished_) return;
    if (!loader_) {
        log::warn("reload ignored", {{"reason", "no configuration source to re-read"}});
        return;
    }
    log::info("reloading configuration", {{"file", cfg_.config_file.empty() ? "-" : cfg_.config_file}});
    // systemd: RELOADING=1 now, READY=1 and a fresh STATUS= however the reload ends.
    notify::reloading();
    struct Done {
        Server* s;
        ~Done() {
            notify::ready();
            notify::status(s->status_summary());
        }
    } done{this};
    Config next;
    std::vector<std::string> errors;
    if (!loader_(next, errors)) {
        ++stats_.reloads_failed;
        for (const auto& e : errors)
            log::error("reload failed; keeping the old configuration", {{"error", e}});
        return;
    }
    std::string error, summary;
    if (!apply_listeners(next, error, summary)) {
        ++stats_.reloads_failed;
        log::error("reload failed; keeping the old configuration", {{"error", error}});
        return;
    }
    // From here on nothing can fail: the new configuration is committed.
    apply_endpoints(next, summary);
    if (next.s.client_cert != cfg_.s.client_cert || next.s.client_key != cfg_.s.client_key ||
        next.s.ca_file != cfg_.s.ca_file) {
        tls_ = std::make_unique<TlsClientContext>(next.s.client_cert, next.s.client_key, next.s.ca_file);
        summary += " tls_files=changed";
    } else {
        tls_->reread();  // SIGHUP also re-reads the certificates
    }
    if (next.s.health_port != cfg_.s.health_port || next.s.health_bind_address != cfg_.s.health_bind_address)
        log::warn("health.bind_address/health.port changes take effect at the next restart");
    policy_ = make_policy(next.s.policy);
    ups_.node_zone = next.s.zone;
    ups_.policy.rise = static_cast<uint32_t>(next.s.health_rise);
    ups_.policy.fall = static_cast<uint32_t>(next.s.health_fall);
    log::Level level;
    log::Format format;
    if (log::parse_level(next.s.log_level, level)) log::set_level(level);
    if (log::parse_format(next.s.log_format, format)) log::set_format(format);
    // The admin address is kept from the running configuration (see above).
    next.s.health_port = cfg_.s.health_port;
    next.s.health_bind_address = cfg_.s.health_bind_address;
    next.admin = cfg_.admin;
    cfg_ = std::move(next);
    apply_listener_tcp_options();
    update_connection_limit();  // max_connections or the number of upstreams may have changed
    ++stats_.reloads_ok;
    log::info("configuration reloaded", {{"changes", summary.empty() ? std::string("none") : summary.substr(1)}});
}

// Binds the listen addresses that are new, then closes the ones that are gone. Established
// connections do not depend on their listener and carry on.
bool Server::apply_listeners(const Config& next, std::string& error, std::string& summary) {
    if (socket_activated_) {  // systemd owns the listening sockets; the configured addresses are unused
        if (next.listen.size() != cfg_.listen.size() ||
            !std::equal(next.listen.begin(), next.listen.end(), cfg_.listen.begin(),
                        [](const sockaddr_storage& a, const sockaddr_storage& b) { return addr_str(a) == addr_str(b); }))
            log::warn("listen address changes are ignored: the sockets come from systemd");
        return true;
    }
    std::vector<std::unique_ptr<Listener>> fresh;
    for (const auto& addr : next.listen) {
        bool have = false;
        for (auto& l : listeners_) have = have || l->name == addr_str(addr);
        if (have) continue;
        auto l = std::make_unique<Listener>();
        if (int r = l->start(loop_, this, reinterpret_cast<const sockaddr*>(&addr)); r != 0) {
            error = fmt::format("cannot listen on {}: {}", addr_str(addr), uv_strerror(r));
            l->close();
            retired_listeners_.push_back(std::move(l));
            for (auto& f : fresh) {
                f->close();
                retired_listeners_.push_back(std::move(f));
            }
            return false;
        }
        fresh.push_back(std::move(l));
    }
    for (auto it = listeners_.begin(); it != listeners_.end();) {
        bool keep = false;
        for (const auto& addr : next.listen) keep = keep || (*it)->name == addr_str(addr);
        if (keep) {
            ++it;
            continue;
        }
        summary += " listener_removed=" + (*it)->name;
        log::info("stopped listening", {{"address", (*it)->name}, {"reason", "reload"}});
        (*it)->close();
        retired_listeners_.push_back(std::move(*it));
        it = listeners_.erase(it);
    }
    for (auto& f : fresh) {
        summary += " listener_added=" + f->name;
        log::info("listening", {{"address", f->name}});
        listeners_.push_back(std::move(f));
    }
    return true;
}

// Endpoints kept stay as they are (state, connections); new ones are checked at once; removed
// ones take no new connections and their connections drain for up to drain_timeout.
void Server::apply_endpoints(const Config& next, std::string& summary) {
    std::vector<bool> keep(ups_.size(), false);
    for (const auto& e : next.endpoints) {
        if (Upstream* u = ups_.find(e.addr)) {
            keep[u->index] = true;
            u->zone = e.zone;
            u->server_name = e.server_name;
        }
    }
    for (size_t i = 0; i < keep.size(); ++i) {
        Upstream& u = ups_[i];
        if (keep[i] || u.removed) continue;
        u.removed = true;
        summary += " endpoint_removed=" + u.name;
        log::info("endpoint removed; its connections drain", {{"upstream", u.name}, {"connections", u.active},
                                                             {"drain_timeout", format_duration(next.s.drain_timeout)}});
        if (checkers_[i]) {
            checkers_[i]->close();
            retired_checkers_.push_back(std::move(checkers_[i]));
        }
        auto drain = static_cast<uint64_t>(next.s.drain_timeout.count());
        for (Connection* c = conns_; c; c = c->next)
            if (c->upstream() == &u) c->close_later_for_removal(drain);
    }
    for (const auto& e : next.endpoints) {
        if (ups_.find(e.addr)) continue;
        Upstream* u = ups_.add(e.addr, e.zone, e.server_name);
        if (!u) {  // validation caps endpoints at 64, but removed ones may still hold slots
            log::error("endpoint not added: every slot is held by a draining endpoint", {{"upstream", e.addr.str()}});
            continue;
        }
        summary += " endpoint_added=" + u->name;
        log::info("endpoint added", {{"upstream", u->name}});
        if (!u->addr.is_ip) resolve(*u);
        start_checker(*u, random_below(200));
    }
}

}  // namespace kprism
