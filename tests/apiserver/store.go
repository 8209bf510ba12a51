// SPDX-License-Identifier: Apache-2.0
// The shared store: one process (`kprism-apiserver store --listen unix:PATH`) plays etcd for every
// stand-in. It keeps objects keyed kind/namespace/name, one global revision that every write
// increments (etcd's mod revision, which the apiserver hands out as metadata.resourceVersion), a
// window of past events for watches, and keys with a TTL (etcd leases, as the lease endpoint
// reconciler uses them). HTTP/JSON over a unix socket: POST /op, GET /watch.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// storeOp is one request to POST /op.
type storeOp struct {
	Op     string          `json:"op"` // get, list, create, put, update, delete, keepalive, rev
	Key    string          `json:"key,omitempty"`
	Prefix string          `json:"prefix,omitempty"`
	Obj    json.RawMessage `json:"obj,omitempty"`
	TTLms  int64           `json:"ttlMs,omitempty"` // put/create: the key is deleted this long after the write; keepalive: renewed for this long
	Rev    int64           `json:"rev,omitempty"`   // update: the key's last write must be this revision (0: any)
}

type storeKV struct {
	Key string          `json:"key"`
	Rev int64           `json:"rev"` // the revision of the key's last write
	Obj json.RawMessage `json:"obj"`
}

// storeReply: Err is "", "exists", "notfound" or "conflict" (update: the key was written after Rev).
type storeReply struct {
	Rev   int64     `json:"rev"` // the store's revision when the operation was done
	KV    *storeKV  `json:"kv,omitempty"`
	Items []storeKV `json:"items,omitempty"`
	Err   string    `json:"err,omitempty"`
}

// storeEvent is one line of GET /watch: ADDED, MODIFIED, DELETED (Rev = the revision of the
// change), PROGRESS (every event up to Rev has been sent: etcd's progress notification) or EXPIRED
// (the requested revision has been compacted away; Rev = the compacted revision).
type storeEvent struct {
	Type string          `json:"type"`
	Key  string          `json:"key,omitempty"`
	Rev  int64           `json:"rev"`
	Obj  json.RawMessage `json:"obj,omitempty"`
}

type memEntry struct {
	rev     int64
	obj     json.RawMessage
	expires time.Time // zero: no TTL
}

type memStore struct {
	mu      sync.Mutex
	rev     int64
	objs    map[string]*memEntry
	hist    []storeEvent // events with Rev > compact, oldest first
	compact int64
	histMax int
	changed chan struct{} // closed and replaced on every write
}

func newMemStore(histMax int) *memStore {
	return &memStore{objs: map[string]*memEntry{}, histMax: histMax, changed: make(chan struct{})}
}

// record appends an event; the caller holds mu and has incremented rev.
func (s *memStore) record(typ, key string, obj json.RawMessage) {
	s.hist = append(s.hist, storeEvent{Type: typ, Key: key, Rev: s.rev, Obj: obj})
	if len(s.hist) > s.histMax {
		drop := len(s.hist) - s.histMax
		s.compact = s.hist[drop-1].Rev
		s.hist = append([]storeEvent(nil), s.hist[drop:]...)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *memStore) do(op storeOp) storeReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op.Op {
	case "rev":
	case "get":
		e, ok := s.objs[op.Key]
		if !ok {
			return storeReply{Rev: s.rev, Err: "notfound"}
		}
		return storeReply{Rev: s.rev, KV: &storeKV{op.Key, e.rev, e.obj}}
	case "list":
		r := storeReply{Rev: s.rev, Items: []storeKV{}}
		for k, e := range s.objs {
			if strings.HasPrefix(k, op.Prefix) {
				r.Items = append(r.Items, storeKV{k, e.rev, e.obj})
			}
		}
		sort.Slice(r.Items, func(i, j int) bool { return r.Items[i].Key < r.Items[j].Key })
		return r
	case "create", "put":
		old, exists := s.objs[op.Key]
		if exists && op.Op == "create" {
			return storeReply{Rev: s.rev, Err: "exists", KV: &storeKV{op.Key, old.rev, old.obj}}
		}
		s.rev++
		e := &memEntry{rev: s.rev, obj: op.Obj}
		if op.TTLms > 0 {
			e.expires = time.Now().Add(time.Duration(op.TTLms) * time.Millisecond)
		}
		s.objs[op.Key] = e
		typ := "ADDED"
		if exists {
			typ = "MODIFIED"
		}
		s.record(typ, op.Key, op.Obj)
		return storeReply{Rev: s.rev, KV: &storeKV{op.Key, e.rev, e.obj}}
	case "update":
		old, exists := s.objs[op.Key]
		if !exists {
			return storeReply{Rev: s.rev, Err: "notfound"}
		}
		if op.Rev != 0 && old.rev != op.Rev {
			return storeReply{Rev: s.rev, Err: "conflict", KV: &storeKV{op.Key, old.rev, old.obj}}
		}
		s.rev++
		s.objs[op.Key] = &memEntry{rev: s.rev, obj: op.Obj, expires: old.expires}
		s.record("MODIFIED", op.Key, op.Obj)
		return storeReply{Rev: s.rev, KV: &storeKV{op.Key, s.rev, op.Obj}}
	case "keepalive":
		// etcd's lease keep-alive: the key lives TTLms longer, no new revision.
		e, ok := s.objs[op.Key]
		if !ok || e.expires.IsZero() {
			return storeReply{Rev: s.rev, Err: "notfound"}
		}
		e.expires = time.Now().Add(time.Duration(op.TTLms) * time.Millisecond)
		return storeReply{Rev: s.rev, KV: &storeKV{op.Key, e.rev, e.obj}}
	case "delete":
		e, ok := s.objs[op.Key]
		if !ok {
			return storeReply{Rev: s.rev, Err: "notfound"}
		}
		s.rev++
		delete(s.objs, op.Key)
		s.record("DELETED", op.Key, e.obj)
		return storeReply{Rev: s.rev, KV: &storeKV{op.Key, s.rev, e.obj}}
	default:
		return storeReply{Rev: s.rev, Err: "bad op " + op.Op}
	}
	return storeReply{Rev: s.rev}
}

// expire deletes the keys whose TTL has run out, as etcd does when a lease expires.
func (s *memStore) expire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := []string{}
	for k, e := range s.objs {
		if !e.expires.IsZero() && now.After(e.expires) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := s.objs[k]
		s.rev++
		delete(s.objs, k)
		s.record("DELETED", k, e.obj)
	}
}

// since returns the events under prefix with Rev > from, the current revision, and the wake-up
// channel; ok is false when from has been compacted away.
func (s *memStore) since(prefix string, from int64) (evs []storeEvent, rev int64, ch chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from < s.compact {
		return nil, s.compact, nil, false
	}
	i := sort.Search(len(s.hist), func(i int) bool { return s.hist[i].Rev > from })
	for ; i < len(s.hist); i++ {
		if strings.HasPrefix(s.hist[i].Key, prefix) {
			evs = append(evs, s.hist[i])
		}
	}
	return evs, s.rev, s.changed, true
}

// serveWatch streams the events under prefix after revision from, with a PROGRESS line at least
// every progress interval.
func (s *memStore) serveWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	from, _ := strconv.ParseInt(q.Get("from"), 10, 64)
	progress := 200 * time.Millisecond
	if ms, err := strconv.Atoi(q.Get("progressMs")); err == nil && ms > 0 {
		progress = time.Duration(ms) * time.Millisecond
	}
	w.Header().Set("Content-Type", "application/json")
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	tick := time.NewTicker(progress)
	defer tick.Stop()
	for {
		evs, rev, ch, ok := s.since(prefix, from)
		if !ok {
			enc.Encode(storeEvent{Type: "EXPIRED", Rev: rev})
			return
		}
		for _, ev := range evs {
			if enc.Encode(ev) != nil {
				return
			}
		}
		if len(evs) > 0 {
			from = evs[len(evs)-1].Rev
			if fl != nil {
				fl.Flush()
			}
			continue
		}
		select {
		case <-ch:
		case <-tick.C:
			// Nothing under prefix up to rev: every event up to rev has been sent.
			from = rev
			if enc.Encode(storeEvent{Type: "PROGRESS", Rev: rev}) != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		case <-r.Context().Done():
			return
		}
	}
}

func listenUnix(addr string) (net.Listener, error) {
	path := strings.TrimPrefix(addr, "unix:")
	if path == addr {
		return nil, fmt.Errorf("store address %q: want unix:PATH", addr)
	}
	os.Remove(path)
	return net.Listen("unix", path)
}

// runStore is `kprism-apiserver store`: it serves until SIGTERM/SIGINT (ctx).
func runStore(ctx context.Context, listen string, histMax int) error {
	ln, err := listenUnix(listen)
	if err != nil {
		return err
	}
	s := newMemStore(histMax)
	mux := http.NewServeMux()
	mux.HandleFunc("/op", func(w http.ResponseWriter, r *http.Request) {
		var op storeOp
		if err := json.NewDecoder(r.Body).Decode(&op); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.do(op))
	})
	mux.HandleFunc("/watch", s.serveWatch)
	srv := &http.Server{Handler: mux}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				s.expire(now)
			case <-ctx.Done():
				return
			}
		}
	}()
	logEvent("store-listening", "address", listen, "history", strconv.Itoa(histMax))
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	logEvent("exit", "code", "0")
	return err
}

// errStoreTimeout: the store did not answer within --etcd-request-timeout (etcd lost).
var errStoreTimeout = errors.New("store request timed out")

// storage is the apiserver's etcd client: storeClient (the shared unix-socket store) and
// etcdClient (a real etcd, etcd.go) both are one. Keys are RESOURCE/NAMESPACE/NAME.
type storage interface {
	do(ctx context.Context, op storeOp) (storeReply, error)
	// ping is the etcd health check: one read bounded by timeout.
	ping(ctx context.Context, timeout time.Duration) error
	// watch streams the events under prefix after revision from into out until ctx ends, etcd is
	// lost, or the store goes away; it closes out when done.
	watch(ctx context.Context, prefix string, from int64, progress time.Duration, out chan<- storeEvent) error
	setLost(lost bool)
	isLost() bool
}

// lossSwitch is the control endpoint's "etcd lost" (POST /etcd/lose): while set, every request
// hangs until the timeout and fails, and the watches in progress are ended; the store itself
// keeps serving the other stand-ins.
type lossSwitch struct {
	timeout time.Duration

	mu      sync.Mutex
	lost    bool
	restore chan struct{} // closed when etcd comes back
	cancels map[int]context.CancelFunc
	nextID  int
}

func (c *lossSwitch) setLost(lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lost == c.lost {
		return
	}
	c.lost = lost
	if lost {
		c.restore = make(chan struct{})
		for id, cancel := range c.cancels {
			cancel()
			delete(c.cancels, id)
		}
	} else {
		close(c.restore)
	}
}

func (c *lossSwitch) isLost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// gate waits while etcd is lost: until it comes back, the timeout, or ctx.
func (c *lossSwitch) gate(ctx context.Context) error {
	c.mu.Lock()
	lost, restore := c.lost, c.restore
	c.mu.Unlock()
	if !lost {
		return nil
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-restore:
		return nil
	case <-t.C:
		return errStoreTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

// track registers a watch's cancel function, ended when etcd is lost; the returned function
// unregisters it. ok is false while etcd is lost.
func (c *lossSwitch) track(cancel context.CancelFunc) (untrack func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return nil, false
	}
	if c.cancels == nil {
		c.cancels = map[int]context.CancelFunc{}
	}
	id := c.nextID
	c.nextID++
	c.cancels[id] = cancel
	return func() {
		c.mu.Lock()
		delete(c.cancels, id)
		c.mu.Unlock()
	}, true
}

// storeClient is the client of the shared unix-socket store.
type storeClient struct {
	lossSwitch
	http   *http.Client
	stream *http.Client
}

func newStoreClient(addr string, timeout time.Duration) (*storeClient, error) {
	path := strings.TrimPrefix(addr, "unix:")
	if path == addr {
		return nil, fmt.Errorf("store address %q: want unix:PATH", addr)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &storeClient{
		lossSwitch: lossSwitch{timeout: timeout},
		http:       &http.Client{Transport: tr, Timeout: timeout},
		stream:     &http.Client{Transport: tr},
	}, nil
}

func (c *storeClient) do(ctx context.Context, op storeOp) (storeReply, error) {
	var r storeReply
	if err := c.gate(ctx); err != nil {
		return r, err
	}
	body, _ := json.Marshal(op)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://store/op", strings.NewReader(string(body)))
	resp, err := c.http.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return r, errStoreTimeout
		}
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return r, fmt.Errorf("store: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r, err
}

// ping fails at once while etcd is lost, else asks for the revision.
func (c *storeClient) ping(ctx context.Context, timeout time.Duration) error {
	if c.isLost() {
		return errors.New("etcd client connection lost")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.do(ctx, storeOp{Op: "rev"})
	return err
}

func (c *storeClient) watch(ctx context.Context, prefix string, from int64, progress time.Duration, out chan<- storeEvent) error {
	defer close(out)
	if err := c.gate(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	untrack, ok := c.track(cancel)
	if !ok {
		return errStoreTimeout
	}
	defer untrack()
	u := fmt.Sprintf("http://store/watch?prefix=%s&from=%d&progressMs=%d", url.QueryEscape(prefix), from, progress.Milliseconds())
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := c.stream.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev storeEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return err
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return ctx.Err()
}
