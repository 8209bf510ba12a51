// SPDX-License-Identifier: Apache-2.0
// The TLS stand-in apiserver wrapper shared by the integration tests and benchmarks.
#include "harness/apiserver.h"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace it {

Apiserver::Apiserver(const Pki& pki, const std::string& n, bool wrong_name, const std::string& host_, int port_)
    : host(host_), port(port_ ? port_ : free_port()), readyz(pki.dir + "/readyz-" + n + "-" + std::to_string(port)),
      name(n) {
    set("200");
    proc = std::make_unique<Process>(std::vector<std::string>{
        standin_bin(), "--listen", addr(), "--name", name, "--tls-cert",
        wrong_name ? pki.wrong_name_server_cert : pki.server_cert, "--tls-key",
        wrong_name ? pki.wrong_name_server_key : pki.server_key, "--client-ca", pki.ca_cert, "--readyz-file", readyz});
    if (!proc->wait_output("listening")) throw std::runtime_error("standin did not start: " + proc->output());
}

void Apiserver::set(const std::string& mode) {
    std::ofstream(readyz + ".tmp") << mode << "\n";
    std::rename((readyz + ".tmp").c_str(), readyz.c_str());
}

}  // namespace it
