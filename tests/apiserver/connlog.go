// SPDX-License-Identifier: Apache-2.0
// --log-connections (test only; kube-apiserver has no such log): one line per accepted TCP
// connection, per TLS handshake (resumed or full) and per request, each with its time in Unix
// microseconds, so that a bench can count what probes cost an apiserver and how bursty they are
// (bench/restart_cost.py). Off by default; nothing else changes when it is on.
package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"time"
)

func unixMicros() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

// logConnections hooks the three log lines into the server and its TLS configuration.
// VerifyConnection is called by crypto/tls on every server handshake, full or resumed, TLS 1.2
// and 1.3, once the client's certificate (if any) is in; it never rejects.
func logConnections(srv *http.Server, cfg *tls.Config) {
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		logEvent("handshake", "resumed", strconv.FormatBool(cs.DidResume), "t", unixMicros())
		return nil
	}
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			logEvent("conn", "t", unixMicros())
		}
	}
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logEvent("request", "path", r.URL.Path, "t", unixMicros())
		inner.ServeHTTP(w, r)
	})
}
