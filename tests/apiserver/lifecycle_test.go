// SPDX-License-Identifier: Apache-2.0
// Graceful termination (pkg/server/genericapiserver.go order), --shutdown-send-retry-after
// (pkg/server/filters/with_retry_after.go), the Endpoints and EndpointSlice with the lease
// reconciler, --goaway-chance, and TLS 1.2 / 1.3 / ALPN / requested client certificates.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slowCreate starts a POST whose body is written in two halves; finish() sends the rest and
// returns the response code. The request is in flight until then.
func slowCreate(t *testing.T, c *http.Client, s *apiserver, name string) (finish func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	body := fmt.Sprintf(`{"metadata":{"name":%q},"data":{"k":"v"}}`, name)
	req, _ := http.NewRequest("POST", s.url("/api/v1/namespaces/default/configmaps"), pr)
	req.Header.Set("Content-Type", "application/json")
	codes := make(chan int, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			codes <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}()
	pw.Write([]byte(body[:10]))
	deadline := time.Now().Add(5 * time.Second)
	for s.state(t)["inflight"].(float64) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return func() int {
		pw.Write([]byte(body[10:]))
		pw.Close()
		return <-codes
	}
}

func dialRefused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return true
}

// SIGTERM: readyz fails [-]shutdown at once while livez is ok, the delay is served normally,
// then the listener is closed (new connections refused) while the request in flight finishes,
// the watches end, exit 0.
func TestGracefulTermination(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--shutdown-delay-duration", "1500ms")
	c := adminClient(t)
	slowClient := adminClient(t)
	w := openWatch(t, c, s.url("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1"))
	finish := slowCreate(t, slowClient, s, "in-flight")

	s.cmd.Process.Signal(syscall.SIGTERM)
	start := time.Now()
	s.waitLog(`event=shutdown-initiated`, 2*time.Second)
	r := do(t, newClient(t, &getPKI(t).admin, false), "GET", s.url("/readyz"), "")
	expect(t, "readyz during the delay", r.code, 500)
	if !strings.Contains(r.body, fmt.Sprintf(fmtFailed, "shutdown")) || !strings.HasSuffix(r.body, fmt.Sprintf(fmtFailedEnd, "readyz")) {
		t.Errorf("readyz body during the delay:\n%s", r.body)
	}
	expect(t, "/readyz/shutdown", do(t, c, "GET", s.url("/readyz/shutdown"), "").body, "internal server error: process is shutting down\n")
	expect(t, "livez during the delay", do(t, newClient(t, &getPKI(t).admin, false), "GET", s.url("/livez"), "").body, bodyOK)
	expect(t, "new connection during the delay", do(t, newClient(t, &getPKI(t).admin, false), "GET", s.url("/version"), "").code, 200)

	s.waitLog(`event=not-accepting-new-requests mode=listener-closed`, 5*time.Second)
	if el := time.Since(start); el < 1400*time.Millisecond {
		t.Errorf("listener closed %v after SIGTERM, before the 1.5s delay", el)
	}
	time.Sleep(100 * time.Millisecond)
	expect(t, "new connection refused after the delay", dialRefused(s.addr), true)
	expect(t, "in-flight request finished", finish(), 201)
	if !w.ends(t, 5*time.Second) {
		t.Error("the watch was not ended")
	}
	expect(t, "exit status", s.wait(10*time.Second), 0)

	// The order of the phases in the log.
	order := []string{"shutdown-initiated", "endpoints-removed", "shutdown-delay-elapsed", "not-accepting-new-requests", "drained", "exit"}
	pos := -1
	for _, ev := range order {
		found := false
		for i, l := range s.log() {
			if strings.Contains(l, "event="+ev) && i > pos {
				pos, found = i, true
				break
			}
		}
		if !found {
			t.Errorf("phase %s missing or out of order in:\n%s", ev, strings.Join(s.log(), "\n"))
		}
	}
}

// --shutdown-send-retry-after: after the delay the server keeps listening; new requests get 429
// Retry-After: 5 and Connection: close (health paths exempt) until the one in flight finishes.
func TestShutdownSendRetryAfter(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--shutdown-delay-duration", "300ms", "--shutdown-send-retry-after=true")
	finish := slowCreate(t, adminClient(t), s, "in-flight")
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.waitLog(`event=not-accepting-new-requests mode=retry-after`, 5*time.Second)

	r := do(t, newClient(t, &getPKI(t).admin, false), "GET", s.url("/api/v1/namespaces/default/configmaps"), "")
	expect(t, "429", fmt.Sprint(r.code, " ", r.body), "429 The apiserver is shutting down, please try again later.\n")
	expect(t, "Retry-After", r.hdr.Get("Retry-After"), "5")
	expect(t, "Connection: close", r.close, true)
	r = do(t, newClient(t, &getPKI(t).admin, false), "GET", s.url("/readyz"), "")
	expect(t, "readyz exempt from 429", r.code, 500)
	expect(t, "in-flight request finished", finish(), 201)
	s.waitLog(`event=listener-closed`, 5*time.Second)
	expect(t, "exit status", s.wait(10*time.Second), 0)
}

type endpointsObj struct {
	Kind     string
	Metadata struct {
		Name, Namespace string
		Labels          map[string]string
	}
	Subsets []struct {
		Addresses []struct{ IP string }
		Ports     []struct {
			Name     string
			Port     int
			Protocol string
		}
	}
}

func endpointsList(t *testing.T, c *http.Client, s *apiserver) []string {
	var e endpointsObj
	r := do(t, c, "GET", s.url("/api/v1/namespaces/default/endpoints/kubernetes"), "")
	json.Unmarshal([]byte(r.body), &e)
	out := []string{}
	for _, ss := range e.Subsets {
		for _, a := range ss.Addresses {
			out = append(out, net.JoinHostPort(a.IP, fmt.Sprint(ss.Ports[0].Port)))
		}
	}
	sort.Strings(out)
	return out
}

func TestEndpointsLeases(t *testing.T) {
	t.Parallel()
	sock := startStore(t, 1000)
	flags := []string{"--endpoint-lease-ttl", "1500ms", "--endpoint-reconcile-interval", "250ms"}
	// As in a cluster: the same port on three addresses (one subset, one slice with all three).
	l, err := net.Listen("tcp", "127.0.0.11:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	var ss []*apiserver
	for _, ip := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		ss = append(ss, startServer(t, sock, append([]string{"--bind-address", ip, "--secure-port", port}, flags...)...))
	}
	c := adminClient(t)
	all := []string{ss[0].addr, ss[1].addr, ss[2].addr}
	sort.Strings(all)
	waitFor := func(what string, want []string, within time.Duration) time.Duration {
		start := time.Now()
		for {
			got := endpointsList(t, c, ss[0])
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("%s: endpoints %v, want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("all three serving", all, 3*time.Second)

	// Shapes. Endpoints: one subset per port, port https/TCP, skip-mirror label.
	var e endpointsObj
	json.Unmarshal([]byte(do(t, c, "GET", ss[0].url("/api/v1/namespaces/default/endpoints/kubernetes"), "").body), &e)
	expect(t, "endpoints kind/labels", fmt.Sprint(e.Kind, " ", e.Metadata.Namespace, "/", e.Metadata.Name, " ", e.Metadata.Labels),
		"Endpoints default/kubernetes map[endpointslice.kubernetes.io/skip-mirror:true]")
	expect(t, "endpoints port", fmt.Sprint(e.Subsets[0].Ports[0]), "{https "+strings.Split(ss[0].addr, ":")[1]+" TCP}")
	// EndpointSlice: endpointsadapter.go's endpointSliceFromEndpoints of the first subset.
	r := do(t, c, "GET", ss[0].url("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes"), "")
	var slice map[string]interface{}
	json.Unmarshal([]byte(r.body), &slice)
	md := slice["metadata"].(map[string]interface{})
	expect(t, "slice header", fmt.Sprint(slice["kind"], " ", slice["apiVersion"], " ", md["labels"], " ", slice["addressType"]),
		"EndpointSlice discovery.k8s.io/v1 map[kubernetes.io/service-name:kubernetes] IPv4")
	eps, _ := json.Marshal(slice["endpoints"])
	ports, _ := json.Marshal(slice["ports"])
	expect(t, "slice endpoints", string(eps), `[{"addresses":["127.0.0.11"],"conditions":{"ready":true}},{"addresses":["127.0.0.12"],"conditions":{"ready":true}},{"addresses":["127.0.0.13"],"conditions":{"ready":true}}]`)
	expect(t, "slice ports", string(ports), `[{"name":"https","port":`+port+`,"protocol":"TCP"}]`)
	expect(t, "endpoints subsets", len(e.Subsets), 1)
	// Watch works on endpoints too (the objects live in the store).
	w := openWatch(t, c, ss[0].url("/api/v1/namespaces/default/endpoints?watch=1"))
	expect(t, "endpoints watch", w.next(t, 2*time.Second).Object.Kind, "Endpoints")

	// Graceful shutdown: removed at once (well before the TTL).
	ss[1].cmd.Process.Signal(syscall.SIGTERM)
	if d := waitFor("after SIGTERM", []string{ss[0].addr, ss[2].addr}, 1*time.Second); d > 700*time.Millisecond {
		t.Errorf("removal after SIGTERM took %v", d)
	}
	// A crash: listed until its lease expires (TTL 1.5s), then dropped by a survivor's reconcile.
	ss[2].cmd.Process.Signal(syscall.SIGKILL)
	ss[2].wait(5 * time.Second)
	time.Sleep(700 * time.Millisecond)
	expect(t, "crashed one still listed before the TTL", fmt.Sprint(endpointsList(t, c, ss[0])), fmt.Sprint([]string{ss[0].addr, ss[2].addr}))
	waitFor("after the crashed one's lease expired", []string{ss[0].addr}, 2500*time.Millisecond)
}

// --goaway-chance 1: every HTTP/2 response makes the server send GOAWAY, so the next request
// needs a new connection; HTTP/1.1 is untouched; chance 0 reuses the connection.
func TestGoaway(t *testing.T) {
	t.Parallel()
	sock := startStore(t, 100)
	always := startServer(t, sock, "--goaway-chance", "1")
	never := startServer(t, sock)
	k := getPKI(t)
	reused := func(c *http.Client, s *apiserver) (proto string, reuse []bool) {
		for i := 0; i < 3; i++ {
			var r bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { r = ci.Reused }})
			req, _ := http.NewRequestWithContext(ctx, "GET", s.url("/version"), nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			proto = resp.Proto
			reuse = append(reuse, r)
			time.Sleep(100 * time.Millisecond) // the GOAWAY follows the response
		}
		return
	}
	p, r := reused(newClient(t, &k.admin, true), always)
	expect(t, "h2 with chance 1", fmt.Sprint(p, r), "HTTP/2.0[false false false]")
	p, r = reused(newClient(t, &k.admin, true), never)
	expect(t, "h2 with chance 0", fmt.Sprint(p, r), "HTTP/2.0[false true true]")
	p, r = reused(newClient(t, &k.admin, false), always)
	expect(t, "http/1.1 with chance 1", fmt.Sprint(p, r), "HTTP/1.1[false true true]")
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100))
	k := getPKI(t)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, protos := range [][]string{{"h2", "http/1.1"}, {"http/1.1"}} {
			requested := false
			cfg := clientTLS(t, nil, protos...)
			cfg.MinVersion, cfg.MaxVersion = v, v
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				requested = true
				return &k.admin, nil
			}
			conn, err := tls.Dial("tcp", s.addr, cfg)
			if err != nil {
				t.Fatalf("TLS %x %v: %v", v, protos, err)
			}
			st := conn.ConnectionState()
			conn.Close()
			expect(t, fmt.Sprintf("TLS %x %v", v, protos), fmt.Sprint(st.Version == v, " ", st.NegotiatedProtocol, " ", requested), fmt.Sprint(true, " ", protos[0], " ", true))
		}
	}
	// No certificate: the handshake succeeds (requested, not required); authn answers 401.
	conn, err := tls.Dial("tcp", s.addr, clientTLS(t, nil, "http/1.1"))
	if err != nil {
		t.Fatalf("handshake without a client certificate: %v", err)
	}
	conn.Close()
	// TLS 1.0 / 1.1 refused.
	cfg := clientTLS(t, nil)
	cfg.MaxVersion = tls.VersionTLS11
	if c, err := tls.Dial("tcp", s.addr, cfg); err == nil {
		c.Close()
		t.Error("TLS 1.1 accepted")
	}
	// Session tickets: a second TLS 1.3 connection resumes.
	cache := tls.NewLRUClientSessionCache(4)
	var resumed []bool
	for i := 0; i < 2; i++ {
		cfg := clientTLS(t, &k.admin, "http/1.1")
		cfg.ClientSessionCache = cache
		c, err := tls.Dial("tcp", s.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The ticket comes after the handshake in TLS 1.3: read the response to a request.
		io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		io.ReadAll(c)
		resumed = append(resumed, c.ConnectionState().DidResume)
		c.Close()
	}
	expect(t, "TLS 1.3 resumption", fmt.Sprint(resumed), "[false true]")
}
