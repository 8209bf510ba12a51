// SPDX-License-Identifier: Apache-2.0
// --log-connections (test only): a connection, its handshake and its request are one line each,
// and a second connection that resumes says so (bench/restart_cost.py counts these lines).
package main

import (
	"crypto/tls"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLogConnections(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--log-connections")
	k := getPKI(t)
	cache := tls.NewLRUClientSessionCache(4)
	for i := 0; i < 2; i++ {
		cfg := clientTLS(t, &k.admin, "http/1.1")
		cfg.ClientSessionCache = cache
		c, err := tls.Dial("tcp", s.addr, cfg)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		io.ReadAll(c)
		c.Close()
	}
	s.waitLog(`event=request path=/readyz t=\d+$`, 5*time.Second)
	rx := regexp.MustCompile(`event=(conn|handshake|request)( resumed=\w+| path=\S+)? t=\d{16}$`)
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 6 && time.Now().Before(deadline) {
		got = got[:0]
		for _, l := range s.log() {
			if m := rx.FindStringSubmatch(l); m != nil {
				got = append(got, m[1]+m[2])
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	expect(t, "--log-connections lines", strings.Join(got, "; "),
		"conn; handshake resumed=false; request path=/readyz; conn; handshake resumed=true; request path=/readyz")
}
