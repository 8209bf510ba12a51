// SPDX-License-Identifier: Apache-2.0
// A hostile apiserver for the readiness probes: real TLS with the test PKI (its server
// certificate; a client certificate of the test CA required), each answer's TLS records and TCP
// writes scripted by the test, and a log of what it answered to each request.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "harness/pki.h"

namespace it {

// What the peer does for one request, step by step. The peer speaks TLS through memory BIOs:
// each record() is one TLS record, and every record made since the last send() goes out in one
// TCP write at the next send(), so a script says exactly what shares a record, a write, a read.
class Script {
public:
    struct Step {
        enum Kind { record, send, send_all_but, close_notify, fin, sleep, hold, close, raw } kind;
        std::string bytes;  // record, raw: the bytes
        size_t n = 0;       // send_all_but: bytes held back; sleep: milliseconds
    };
    Script& record(std::string plaintext);                 // one TLS record (at most 16 KiB)
    Script& records(const std::string& s, size_t each);    // `s` in records of `each` bytes
    Script& send();                                        // one TCP write of all not sent yet
    // One TCP write of all but the last `n` bytes not sent yet (the end of a record, say): the
    // rest goes first at the next send(), of this script or of the next request's.
    Script& send_all_but(size_t n);
    Script& close_notify();                                // a close_notify record
    Script& fin();                                         // send(), then shutdown(SHUT_WR)
    Script& sleep(std::chrono::milliseconds ms);
    // Each byte of `s` its own record and TCP write, `gap` apart.
    Script& drip(const std::string& s, std::chrono::milliseconds gap);
    Script& hold();   // answer nothing more: read and log requests until the peer goes
    Script& close();  // send(), then close the socket
    Script& raw(std::string bytes);  // bytes onto TCP as they are, outside TLS (sent at send())

    // The result class kprism must record for this request (I8): by default that of `status`,
    // the final answer's code (200 ready, 401/403 unauthorized, else not_ready). "" for a
    // request that gets no answer and no result of its own (the probe moves to a new connection).
    Script& expect(int status);
    Script& expect_class(std::string result);
    int status = 0;
    std::string result;
    std::vector<Step> steps;
};

// An HTTP response with a Content-Length body. A 200's body is "ok"; any other's names the
// request's sequence number, "(answer N)", which kprism logs with a failed check.
std::string http_answer(int code, int seq, const std::string& extra_headers = "",
                        const std::string& version = "HTTP/1.1");
// The common script: one answer `code` in one record and one write.
Script answer(int code, int seq);

struct PeerRequest {
    int seq;   // 1, 2, ... over the peer's life, in the order read
    int conn;  // 1, 2, ...: the TLS connection it came on
    int nth;   // 1, 2, ... on that connection
};

struct PeerAnswer {
    PeerRequest req;
    int status;          // the answer's code; 0: none
    std::string result;  // the class kprism must record ("" none)
};

class ProbePeer {
public:
    using Scripter = std::function<Script(const PeerRequest&)>;
    ProbePeer(const Pki& pki, Scripter s);
    ~ProbePeer();
    std::string addr() const { return server_->endpoint(); }
    void set(Scripter s);
    // Every request read, in order, with what the script said it answered (logged before the
    // answer is written: a client that has the answer finds it here).
    std::vector<PeerAnswer> answers() const;
    int handshakes() const;
    // Requests read on a connection the script had left in hold(): a request nobody answers.
    int unanswered() const;

private:
    void serve(int fd);
    struct Conn;
    bool run(Conn& c, const Script& s);
    std::unique_ptr<void, void (*)(void*)> ctx_;
    mutable std::mutex mu_;
    Scripter scripter_;
    std::vector<PeerAnswer> answers_;
    int seq_ = 0, conns_ = 0, unanswered_ = 0;
    std::unique_ptr<TcpServer> server_;  // last: its threads stop before the rest goes
};

// The result classes kprism recorded for `addr`, in order, from its debug "health check" lines,
// and the "(answer N)" each failed one quotes (0 when none).
struct Observed {
    std::string result;
    int seq;
};
std::vector<Observed> observed_checks(const Process& k, const std::string& addr);

}  // namespace it
