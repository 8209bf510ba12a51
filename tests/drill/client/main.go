// SPDX-License-Identifier: Apache-2.0
// drill-client: the drill's kubelet and host agent as client-go builds them, one pair per balancer
// on a node, each on its own HTTP/2 connection (tests/drill/README.md, "Clients").
//
// usage: drill-client SPEC.json   (the spec run.py writes for kubelet.py: node, logdir, cert, key,
// ca, balancers [{name, port}], deadline_s; or, for many nodes from one process, clients
// [{node, name, host, port, cert, key}] instead of node, cert, key and balancers, and
// no_lease_watch). Events go to LOGDIR/NODE--BALANCER.h2.jsonl, one JSON
// object a line, in kubelet.py's format ({"t", "k", "ok", "code", "ms", "hung", "err"}), so that
// report.py reads both client models alike. Runs until SIGTERM or its deadline.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

type spec struct {
	Node      string  `json:"node"`
	Logdir    string  `json:"logdir"`
	Cert      string  `json:"cert"`
	Key       string  `json:"key"`
	CA        string  `json:"ca"`
	DeadlineS float64 `json:"deadline_s"`
	Balancers []struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	} `json:"balancers"`
	// Clients, when set, replaces Node, Cert, Key and Balancers: one kubelet and agent pair each,
	// with its own certificate and balancer address (a fleet of nodes driven by one process).
	Clients []clientSpec `json:"clients"`
	// NoLeaseWatch leaves out the drill's watch of every node's Lease (kubelet has none; across a
	// fleet it costs each client an event per renewal of every node).
	NoLeaseWatch bool `json:"no_lease_watch"`
}

type clientSpec struct {
	Node string `json:"node"` // the Node and Lease are NODE--NAME; the log NODE--NAME.h2.jsonl
	Name string `json:"name"`
	Host string `json:"host"`
	Port int    `json:"port"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// clients: the pairs to run, from Clients or from Node and Balancers (on 127.0.0.1).
func (s *spec) clients() []clientSpec {
	if len(s.Clients) > 0 {
		return s.Clients
	}
	var out []clientSpec
	for _, b := range s.Balancers {
		out = append(out, clientSpec{Node: s.Node, Name: b.Name, Host: "127.0.0.1", Port: b.Port, Cert: s.Cert, Key: s.Key})
	}
	return out
}

// eventLog writes one JSON object a line; shared by the kubelet and the agent of one balancer.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *eventLog) write(kind string, kv map[string]interface{}) {
	m := map[string]interface{}{"t": float64(time.Now().UnixMilli()) / 1000, "k": kind}
	for k, v := range kv {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	l.mu.Lock()
	l.f.Write(append(b, '\n'))
	l.mu.Unlock()
}

// client is one client-go clientset: a base URL, one transport (so one HTTP/2 connection), the
// dialer that can close it, and the log its requests go to.
type client struct {
	who    string // "kubelet" or "agent": a prefix of the event kinds of the agent
	base   string
	hc     *http.Client
	dialer *trackingDialer
	log    *eventLog
	ctx    context.Context
}

// requestTimeout: kubelet's heartbeat client (the lease and the node status) times out after
// NodeStatusUpdateFrequency, 10 s (cmd/kubelet/app/server.go); the other requests here use it
// too, so that "hung" means one thing in every model: unanswered after 10 s.
const requestTimeout = 10 * time.Second

type result struct {
	code  int
	body  []byte
	proto string
	err   error
}

// do sends one request and logs it as kind: ok for a 2xx, failed otherwise, hung when no answer
// came within 10 s. timeout bounds each attempt (0: none, as client-go's main client has). A GET
// that fails with a reset, a probable EOF or a lost HTTP/2 connection is sent again after 1 s, up
// to 10 times, as client-go's rest.Request does (rest/request.go isErrRetryableFunc, with_retry.go);
// the log has one line for the request, with the retries it took.
func (c *client) do(kind, method, path string, body interface{}, timeout time.Duration) result {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	t0 := time.Now()
	retries := 0
	for {
		res, err := c.once(method, path, raw, timeout)
		if c.ctx.Err() != nil {
			return result{err: c.ctx.Err()}
		}
		if err != nil && method == "GET" && retries < 10 && (isProbableEOF(err) || isConnectionReset(err) || isHTTP2ConnectionLost(err)) {
			retries++
			if !sleep(c.ctx, time.Second) {
				return result{err: c.ctx.Err()}
			}
			continue
		}
		ms := time.Since(t0).Milliseconds()
		if err != nil {
			hung := errors.Is(err, context.DeadlineExceeded) || ms >= requestTimeout.Milliseconds()-50
			c.log.write(kind, map[string]interface{}{"ok": false, "hung": hung, "err": trim(err.Error()), "ms": ms, "retries": retries})
			return result{err: err}
		}
		// a missing Lease is the lease controller's cue to create it, and a Node that exists the
		// registration's answer to a restart: neither is a failure
		ok := res.code >= 200 && res.code < 300 || res.code == 404 && kind == "heartbeat-get" ||
			res.code == 409 && kind == "node-register"
		kv := map[string]interface{}{"ok": ok, "code": res.code, "ms": ms, "proto": res.proto, "retries": retries}
		if !ok {
			kv["err"] = trim(string(res.body))
		}
		c.log.write(kind, kv)
		return res
	}
}

// once is one HTTP attempt.
func (c *client) once(method, path string, raw []byte, timeout time.Duration) (result, error) {
	ctx := c.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "drill-"+c.who+" (client-go model)")
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return result{}, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return result{}, err
	}
	return result{code: resp.StatusCode, body: data, proto: resp.Proto}, nil
}

func trim(s string) string {
	if len(s) > 160 {
		return s[:160]
	}
	return s
}

// sleep waits d or until the client stops; false when it stopped.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter is wait.Jitter: d plus up to factor*d at random.
func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(rand.Float64()*factor*float64(d))
}

func newClient(ctx context.Context, cs clientSpec, ca, who string, log *eventLog) (*client, error) {
	rt, d, err := newTransport(cs.Cert, cs.Key, ca)
	if err != nil {
		return nil, err
	}
	return &client{who: who, base: "https://" + net.JoinHostPort(cs.Host, strconv.Itoa(cs.Port)), hc: &http.Client{Transport: rt},
		dialer: d, log: log, ctx: ctx}, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: drill-client SPEC.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill-client:", err)
		os.Exit(2)
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		fmt.Fprintln(os.Stderr, "drill-client:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.DeadlineS*float64(time.Second)))
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; cancel() }()
	var wg sync.WaitGroup
	for _, cs := range s.clients() {
		f, err := os.OpenFile(fmt.Sprintf("%s/%s--%s.h2.jsonl", s.Logdir, cs.Node, cs.Name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "drill-client:", err)
			os.Exit(2)
		}
		log := &eventLog{f: f}
		name := cs.Node + "--" + cs.Name
		kc, err := newClient(ctx, cs, s.CA, "kubelet", log)
		if err != nil {
			fmt.Fprintln(os.Stderr, "drill-client:", err)
			os.Exit(2)
		}
		ac, err := newClient(ctx, cs, s.CA, "agent", log)
		if err != nil {
			fmt.Fprintln(os.Stderr, "drill-client:", err)
			os.Exit(2)
		}
		k := &kubelet{c: kc, node: name, registered: make(chan struct{}), leaseWatch: !s.NoLeaseWatch}
		for _, run := range k.loops() {
			wg.Add(1)
			go func(f func()) { defer wg.Done(); f() }(run)
		}
		for _, run := range agentLoops(ac, name, k.registered) {
			wg.Add(1)
			go func(f func()) { defer wg.Done(); f() }(run)
		}
	}
	wg.Wait()
}
