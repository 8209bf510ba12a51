# SPDX-License-Identifier: Apache-2.0
"""Test PKI made with the openssl CLI at test time: a cluster CA, one apiserver serving
certificate (SAN: every stand-in address and 127.0.0.1, since clients reach the apiservers
through kprism on loopback with TLS end to end), and a kubelet-style client certificate
(O=system:nodes, CN=system:node:faults) whose certificate and key share one file, as in
kubelet-client-current.pem. All keys are EC P-256."""

import os
import subprocess


class Pki:
    def __init__(self, directory, server_ips):
        self.dir = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.ca_cert = os.path.join(directory, "ca.crt")
        self.ca_key = os.path.join(directory, "ca.key")
        self.server_pem = os.path.join(directory, "apiserver.pem")  # certificate + key
        self.client_pem = os.path.join(directory, "kubelet-client.pem")  # certificate + key
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", self.ca_key, "-out", self.ca_cert, "-days", "2", "-subj", "/CN=faults-ca")
        san = ",".join(["IP:127.0.0.1", "DNS:kubernetes"] + ["IP:" + ip for ip in server_ips])
        self._issue("apiserver", "/CN=kube-apiserver", f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n",
                    self.server_pem)
        self._issue("client", "/O=system:nodes/CN=system:node:faults", "extendedKeyUsage=clientAuth\n",
                    self.client_pem)

    def _openssl(self, *args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed: {r.stderr.strip()}")

    def _issue(self, name, subject, extensions, out_pem):
        key, csr, crt, ext = (os.path.join(self.dir, f"{name}.{s}") for s in ("key", "csr", "crt", "ext"))
        with open(ext, "w") as f:
            f.write(extensions)
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", subject)
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key, "-CAcreateserial",
                      "-days", "2", "-extfile", ext, "-out", crt)
        with open(crt) as c, open(key) as k, open(os.open(out_pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as o:
            o.write(c.read() + k.read())
