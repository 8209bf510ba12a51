// SPDX-License-Identifier: Apache-2.0
// Live reload (SIGHUP): the new configuration is loaded and validated whole (with the TLS files of
// new paths), new listeners are bound, and only then is anything changed; a failure at any step
// keeps the old one in force.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <memory>

#include "kprism/proxy/connection.h"
#include "kprism/base/log.h"
#include "kprism/base/sd_notify.h"
#include "kprism/daemon/server.h"

namespace kprism {

// Every attempt ends here, also one that is refused, so that `kprism reload` (which waits for
// reload_generation to move) always gets an answer.
void Server::finish_reload(bool ok, std::string changes, std::string error) {
    ++(ok ? stats_.reloads_ok : stats_.reloads_failed);
    ++stats_.reload_generation;
    stats_.reload_last_ok = ok;
    stats_.reload_last_changes = std::move(changes);
    stats_.reload_last_error = std::move(error);
    stats_.reload_last_unix = static_cast<int64_t>(std::time(nullptr));
}

void Server::reload() {
    if (draining_ || finished_) {
        log::warn("reload ignored", {{"reason", "shutting down"}});
        finish_reload(false, "", "kprism is shutting down");
        return;
    }
    if (!loader_) {
        log::warn("reload ignored", {{"reason", "no configuration source to re-read"}});
        finish_reload(false, "", "no configuration source to re-read");
        return;
    }
    log::info("reloading configuration", {{"file", cfg_.config_file.empty() ? "-" : cfg_.config_file}});
    // systemd: RELOADING=1 now, READY=1 and a fresh STATUS= however the reload ends.
    notify::reloading();
    struct Done {
        Server* s;
        ~Done() {
            notify::ready();
            notify::status(s->control().summary());
        }
    } done{this};
    Config next;
    std::vector<std::string> errors;
    if (!loader_(next, errors)) {
        std::string all;
        for (const auto& e : errors) {
            log::error("reload failed; keeping the old configuration", {{"error", e}});
            all += (all.empty() ? "" : "; ") + e;
        }
        finish_reload(false, "", all.empty() ? std::string("the configuration did not load") : all);
        return;
    }
    // The TLS files a new path names load now, before anything is applied: files that do not
    // load refuse the reload whole, and the certificate in use stays (the checks go on with it).
    std::string error, summary;
    std::unique_ptr<TlsClientContext> tls;
    if (!control_.prepare_tls(next, tls, error)) {
        log::error("reload failed; keeping the old configuration", {{"error", error}});
        finish_reload(false, "", error);
        return;
    }
    if (!apply_listeners(next, error, summary)) {
        log::error("reload failed; keeping the old configuration", {{"error", error}});
        finish_reload(false, "", error);
        return;
    }
    // From here on nothing can fail: the new configuration is committed.
    note_own_listeners();  // before the endpoints: a new one may be a listener
    control_.reconfigure(next, std::move(tls), summary);
    keep_restart_only_settings(cfg_, next);
    selection_ = make_policy(next.policy);
    log::set_level(next.log_level);
    log::set_format(next.log_format);
    cfg_ = std::move(next);
    control_.reload_tls_now(summary);
    apply_listener_tcp_options();
    update_connection_limit();  // max_connections or the number of upstreams may have changed
    std::string changes = summary.empty() ? std::string("none") : summary.substr(1);
    log::info("configuration reloaded", {{"changes", changes}});
    finish_reload(true, std::move(changes), "");
}

// Binds the listen addresses that are new, then closes the ones that are gone. Established
// connections do not depend on their listener and carry on.
bool Server::apply_listeners(const Config& next, std::string& error, std::string& summary) {
    if (sd_.socket_activated) {  // systemd owns the listening sockets; the configured addresses are unused
        if (next.listen.size() != cfg_.listen.size() ||
            !std::equal(next.listen.begin(), next.listen.end(), cfg_.listen.begin(),
                        [](const sockaddr_storage& a, const sockaddr_storage& b) { return sockaddr_str(a) == sockaddr_str(b); }))
            log::warn("listen address changes are ignored: the sockets come from systemd");
        return true;
    }
    std::vector<std::unique_ptr<Listener>> fresh;
    for (const auto& addr : next.listen) {
        bool have = false;
        for (auto& l : listeners_) have = have || l->name == sockaddr_str(addr);
        if (have) continue;
        auto l = std::make_unique<Listener>();
        if (int r = l->start(loop_, this, as_sockaddr(addr)); r != 0) {
            error = fmt::format("cannot listen on {}: {}", sockaddr_str(addr), uv_strerror(r));
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
    bool changed = !fresh.empty();
    for (auto it = listeners_.begin(); it != listeners_.end();) {
        bool keep = false;
        for (const auto& addr : next.listen) keep = keep || (*it)->name == sockaddr_str(addr);
        if (keep) {
            ++it;
            continue;
        }
        changed = true;
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
    if (changed) handoff_.listeners_changed();  // a removed listener must not stay open in the crash copy
    return true;
}

}  // namespace kprism
