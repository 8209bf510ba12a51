// SPDX-License-Identifier: Apache-2.0
// Serving TLS as kube-apiserver sets it up (k8s.io/apiserver pkg/server/secure_serving.go and
// options/serving.go): TLS 1.2 minimum (the apiserver's default floor) and 1.3, ALPN h2 then
// http/1.1 (net/http then serves HTTP/2 itself), and with a client CA the client certificate is
// only REQUESTED (tls.RequestClientCert): it is verified by the authentication step
// (pkg/authentication/request/x509/x509.go), not by the handshake. Session tickets stay on, as
// crypto/tls's default. --tls-max-version is the stand-in's own (kube-apiserver has only
// --tls-min-version): it lets the benches pin TLS 1.2.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// tlsVersions maps --tls-max-version's values to crypto/tls's constants.
var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

func serverTLSConfig(certFile, keyFile, clientCAFile string, maxVersion uint16) (*tls.Config, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--cert-file/--key-file: %v", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		MaxVersion:   maxVersion,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	var pool *x509.CertPool
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca-file: %v", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--client-ca-file %s: no certificate", clientCAFile)
		}
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg, pool, nil
}
