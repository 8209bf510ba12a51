// SPDX-License-Identifier: Apache-2.0
// One client-go-shaped transport per client: TLS with the node's kubelet certificate, HTTP/2 with
// client-go's health check, and a dialer that can close every connection it made (kubelet's
// closeAllConns).

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

// trackingDialer is client-go's util/connrotation.Dialer: it remembers every connection it dialled
// so that CloseAll can close them, the watches' too. The kubelet builds its transport on one
// (cmd/kubelet/app/server.go buildKubeletClientConfig, updateDialer) and hands CloseAll to the
// node lease controller and the node status loop as onRepeatedHeartbeatFailure.
type trackingDialer struct {
	d     net.Dialer
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	owner *trackingDialer
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

func (d *trackingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, owner: d}
	d.mu.Lock()
	d.conns[tc] = struct{}{}
	d.mu.Unlock()
	return tc, nil
}

// CloseAll closes every connection this dialer made; returns how many.
func (d *trackingDialer) CloseAll() int {
	d.mu.Lock()
	conns := make([]*trackedConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// newTransport builds the transport client-go builds for a kubeconfig with a client certificate:
// k8s.io/client-go/transport/cache.go (net.Dialer Timeout 30 s, KeepAlive 30 s;
// TLSHandshakeTimeout 10 s; MaxIdleConnsPerHost 25) and k8s.io/apimachinery/pkg/util/net/http.go
// SetTransportDefaults / configureHTTP2Transport (HTTP/2 through ALPN, ReadIdleTimeout 30 s:
// a connection that read nothing for 30 s is pinged; PingTimeout 15 s: unanswered, it is closed).
func newTransport(certFile, keyFile, caFile string) (http.RoundTripper, *trackingDialer, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%s: no certificate", caFile)
	}
	d := &trackingDialer{d: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		conns: map[*trackedConn]struct{}{}}
	t1 := &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	}
	t2, err := http2.ConfigureTransports(t1)
	if err != nil {
		return nil, nil, err
	}
	t2.ReadIdleTimeout = 30 * time.Second
	t2.PingTimeout = 15 * time.Second
	return t1, d, nil
}

// isProbableEOF is k8s.io/apimachinery/pkg/util/net/http.go IsProbableEOF: a watch stream that
// ends with one of these is taken as closed (the reflector watches again at once from its
// resourceVersion); any other error ends the watch with an error (the reflector backs off and
// lists again).
func isProbableEOF(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	switch {
	case msg == "http: can't write HTTP request on broken connection":
		return true
	case strings.Contains(msg, "http2: server sent GOAWAY and closed the connection"):
		return true
	case strings.Contains(msg, "connection reset by peer"):
		return true
	case strings.Contains(strings.ToLower(msg), "use of closed network connection"):
		return true
	}
	return false
}

// isConnectionReset is apimachinery's IsConnectionReset: ECONNRESET.
func isConnectionReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

// isHTTP2ConnectionLost is apimachinery's IsHTTP2ConnectionLost: the HTTP/2 health check closed
// the connection ("http2: client connection lost").
func isHTTP2ConnectionLost(err error) bool {
	return err != nil && strings.Contains(err.Error(), "http2: client connection lost")
}

// isTimeout is apimachinery's IsTimeout: a net.Error that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isConnectionRefused: the reflector retries a watch that could not connect after its backoff,
// without a list (client-go tools/cache/reflector.go, isWatchErrorRetriable).
func isConnectionRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
