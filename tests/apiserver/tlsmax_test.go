// SPDX-License-Identifier: Apache-2.0
// --tls-max-version (the stand-in's own flag; kube-apiserver has only --tls-min-version): with
// 1.2 a TLS 1.3-only client is refused, a TLS 1.2 handshake and request succeed, and a second
// TLS 1.2 connection resumes (session ticket), which the probe-cost bench relies on.
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestTLSMaxVersion(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--tls-max-version", "1.2")
	k := getPKI(t)

	only13 := clientTLS(t, &k.admin, "http/1.1")
	only13.MinVersion = tls.VersionTLS13
	if c, err := tls.Dial("tcp", s.addr, only13); err == nil {
		c.Close()
		t.Fatal("a TLS 1.3-only client was accepted with --tls-max-version 1.2")
	}

	cache := tls.NewLRUClientSessionCache(4)
	var got []string
	for i := 0; i < 2; i++ {
		cfg := clientTLS(t, &k.admin, "http/1.1") // offers 1.2 and 1.3
		cfg.ClientSessionCache = cache
		c, err := tls.Dial("tcp", s.addr, cfg)
		if err != nil {
			t.Fatalf("TLS 1.2 handshake: %v", err)
		}
		io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, _ := io.ReadAll(c)
		st := c.ConnectionState()
		c.Close()
		status, _, _ := strings.Cut(string(resp), "\r\n")
		got = append(got, fmt.Sprintf("%s %s resumed=%v", map[uint16]string{tls.VersionTLS12: "TLS 1.2", tls.VersionTLS13: "TLS 1.3"}[st.Version], status, st.DidResume))
	}
	expect(t, "TLS 1.2 with --tls-max-version 1.2", strings.Join(got, "; "),
		"TLS 1.2 HTTP/1.1 200 OK resumed=false; TLS 1.2 HTTP/1.1 200 OK resumed=true")

	if _, err := serveFlags([]string{"--tls-cert-file", "c", "--tls-private-key-file", "k", "--tls-max-version", "1.1"}); err == nil {
		t.Error("--tls-max-version 1.1 accepted")
	}
	if o, err := serveFlags([]string{"--tls-cert-file", "c", "--tls-private-key-file", "k"}); err != nil || o.tlsMaxVersion != tls.VersionTLS13 {
		t.Errorf("default --tls-max-version: %v %x, want TLS 1.3", err, o.tlsMaxVersion)
	}
}
