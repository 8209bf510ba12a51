// SPDX-License-Identifier: Apache-2.0
// A TLS stand-in apiserver (build/kprism-standin) for tests: client certificates required from
// the test CA, /readyz answered as the test sets it.
#pragma once

#include <memory>
#include <string>

#include "harness/harness.h"
#include "harness/pki.h"

namespace it {

struct Apiserver {
    // Starts on a free loopback port (or `host`:`port_` when given: 127.0.0.N, for several on one
    // port behind one hostname); `wrong_name` serves a certificate for another name.
    Apiserver(const Pki& pki, const std::string& name, bool wrong_name = false, const std::string& host = "127.0.0.1",
              int port_ = 0);
    // What GET /readyz answers from now on: "200", "500", "401", "hang", "slow MS", "garbage", ...
    void set(const std::string& mode);
    std::string addr() const { return host + ":" + std::to_string(port); }
    std::string host;

    int port;
    std::string readyz;  // the --readyz-file
    std::string name;
    std::unique_ptr<Process> proc;
};

}  // namespace it
