// SPDX-License-Identifier: Apache-2.0
// Whether the apiservers accept kprism's client certificate, as one node-level condition:
// "rejected" when every apiserver that answers rejects it (401/403 or a TLS alert), which is a
// problem of the node's credentials, not of the apiservers.
#pragma once

#include <cstdint>

#include "kprism/upstreams/upstream.h"

namespace kprism {

enum class CredentialsState {
    unknown,   // no certificate, no answer yet, or just rotated
    ok,        // an apiserver accepted the current certificate
    rejected,  // every apiserver that answered rejected it
};
const char* credentials_state_name(CredentialsState s);  // "unknown", "ok", "rejected"

// What a probe result says about the client certificate (CertVerdict, upstream.h).
constexpr CertVerdict cert_verdict_of(CheckResult r) { return check_result_info(r).verdict; }

// The condition's state machine, pure: it reads the upstreams' probe marks (Upstream::probe) and
// is told the current certificate generation (TlsClientContext::generation).
//
// An upstream that starts rejecting opens a round: every other one is probed at once, and the
// round ends when each live, resolved upstream has a verdict from after its start with the
// current certificate. All rejecting (at least one, none accepting) enters the condition;
// otherwise the rejecting ones are the odd ones out and their rejections count as failed checks.
// While a round runs, and while in the condition, rejections do not count towards health (an
// apiserver that rejects the certificate may serve kubelet, which presents its own, perfectly
// well). The condition ends when any apiserver accepts the certificate, or when it rotates.
class Credentials {
public:
    enum class Event {
        none,
        round_started,  // re-probe every upstream now
        entered,        // log once: every apiserver rejects the certificate
        partial,        // round over, some accept: apply the held rejections of the round (from round_start)
        left,           // an apiserver accepted the certificate (the upstream whose result it was)
    };
    struct Outcome {
        Event event = Event::none;
        bool hold = false;  // do not apply this result to the upstream's health
        uint64_t round_start_ms = 0;
    };

    // One probe result of `u`, whose probe mark is already updated (`prev`: the mark before),
    // at loop time `now_ms`, `generation` being that of the certificate in use now.
    Outcome on_result(const UpstreamPool& ups, const Upstream& u, const ProbeMark& prev, uint64_t now_ms,
                      uint64_t generation);
    // The certificate files were loaded anew. Returns true if that ended the condition.
    bool on_rotation();
    // A restart: the condition as the previous process left it (no round running).
    void restore(CredentialsState s) {
        state_ = s;
        round_ = false;
    }

    CredentialsState state() const { return state_; }
    bool rejected() const { return state_ == CredentialsState::rejected; }
    bool round_running() const { return round_; }

private:
    CredentialsState state_ = CredentialsState::unknown;
    bool round_ = false;
    uint64_t round_start_ms_ = 0;
};

}  // namespace kprism
