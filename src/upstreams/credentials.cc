// SPDX-License-Identifier: Apache-2.0
// The node-level condition "the apiservers reject kprism's client certificate": rounds of
// re-probes when an upstream starts rejecting, entering and leaving the condition.
#include "kprism/upstreams/credentials.h"

namespace kprism {

const char* credentials_state_name(CredentialsState s) {
    switch (s) {
    case CredentialsState::unknown: return "unknown";
    case CredentialsState::ok: return "ok";
    case CredentialsState::rejected: return "rejected";
    }
    return "unknown";
}

Credentials::Outcome Credentials::on_result(const UpstreamPool& ups, const Upstream& u, const ProbeMark& prev,
                                            uint64_t now_ms, uint64_t generation) {
    Outcome out;
    const CertVerdict v = cert_verdict_of(u.probe.result);
    // A probe that ran with an older certificate says nothing about the current one.
    if (u.probe.generation != generation) {
        out.hold = v == CertVerdict::rejected;
        return out;
    }
    if (v == CertVerdict::accepted) {
        const bool was_rejected = state_ == CredentialsState::rejected;
        state_ = CredentialsState::ok;
        if (round_) {  // someone accepts: whoever rejected in this round is the odd one out
            round_ = false;
            out.event = Event::partial;
            out.round_start_ms = round_start_ms_;
        } else if (was_rejected) {
            out.event = Event::left;
        }
        return out;
    }
    if (state_ == CredentialsState::rejected) {
        out.hold = v == CertVerdict::rejected;
        return out;
    }
    if (v == CertVerdict::rejected && !round_) {
        const bool was_rejecting = prev.has && prev.generation == generation &&
                                   cert_verdict_of(prev.result) == CertVerdict::rejected;
        if (was_rejecting) return out;  // the odd one out still rejects: a failed check as any other
        round_ = true;
        round_start_ms_ = now_ms;
        out.event = Event::round_started;
    }
    if (!round_) return out;
    out.hold = v == CertVerdict::rejected;
    bool any_rejected = false;
    for (size_t i = 0; i < ups.size(); ++i) {
        const Upstream& w = ups[i];
        if (w.removed || !w.resolved) continue;
        const ProbeMark& m = w.probe;
        if (!m.has || m.generation != generation || m.at_ms < round_start_ms_) return out;  // still waiting
        any_rejected = any_rejected || cert_verdict_of(m.result) == CertVerdict::rejected;
    }
    round_ = false;
    out.round_start_ms = round_start_ms_;
    if (any_rejected) {
        state_ = CredentialsState::rejected;
        out.event = Event::entered;
    } else {
        // The ones that rejected went silent (timeouts, refused connects): their rejections of
        // this round count after all.
        out.event = Event::partial;
    }
    return out;
}

bool Credentials::on_rotation() {
    const bool was_rejected = state_ == CredentialsState::rejected;
    state_ = CredentialsState::unknown;
    round_ = false;
    return was_rejected;
}

}  // namespace kprism
