// SPDX-License-Identifier: Apache-2.0
// client-go's reflector (tools/cache/reflector.go ListAndWatch): list, then watch from the list's
// resourceVersion with bookmarks, resume after a watch ends, list again after an error or a 410.

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

type reflector struct {
	c          *client
	name, path string
	query      url.Values
	logEvents  bool // log "watch-event" (at most one per 0.5 s) for the watch-gap figure
	keepLast   bool // keep the last object seen (the Node: the status loop's informer cache)
	backoff    time.Duration
	lastBackon time.Time
	mu         sync.Mutex
	lastObj    map[string]interface{}
}

func newReflector(c *client, name, path string, q url.Values, logEvents bool) *reflector {
	if q == nil {
		q = url.Values{}
	}
	return &reflector{c: c, name: name, path: path, query: q, logEvents: logEvents}
}

// last is a copy of the last object this reflector saw (keepLast), nil if none.
func (r *reflector) last() map[string]interface{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastObj == nil {
		return nil
	}
	return copyObject(r.lastObj)
}

func (r *reflector) keep(obj map[string]interface{}) {
	r.mu.Lock()
	r.lastObj = obj
	r.mu.Unlock()
}

// wait is the reflector's backoff manager, NewExponentialBackoffManager(800 ms, 30 s, 2 m, 2.0,
// 1.0): 800 ms doubling to 30 s, back to the start after 2 m without a backoff, jitter 1.0.
func (r *reflector) wait() bool {
	if r.backoff == 0 || time.Since(r.lastBackon) > 2*time.Minute {
		r.backoff = 800 * time.Millisecond
	} else if r.backoff *= 2; r.backoff > 30*time.Second {
		r.backoff = 30 * time.Second
	}
	r.lastBackon = time.Now()
	return sleep(r.c.ctx, jitter(r.backoff, 1.0))
}

func (r *reflector) kind(k string) string {
	if r.c.who == "agent" {
		return "agent-" + k
	}
	return k
}

// run: the first list asks for resourceVersion=0 (kube-apiserver answers it from its watch cache);
// a later one for the last synced resourceVersion (relistResourceVersion), or "" (a quorum read
// from etcd) right after a list answered 410. A list has no timeout (kubelet's main client has
// none); it ends when the server answers or the connection does.
func (r *reflector) run() {
	rv, listRV, lists := "", "0", 0
	for r.c.ctx.Err() == nil {
		if listRV != "-" {
			q := url.Values{}
			for k, v := range r.query {
				q[k] = v
			}
			if listRV != "" {
				q.Set("resourceVersion", listRV)
			}
			res := r.c.do(r.kind("list"), "GET", r.path+"?"+q.Encode(), nil, 0)
			if res.err == nil && res.code == 410 && listRV != "" {
				listRV = "" // isLastSyncResourceVersionUnavailable: list again from etcd, at once
				continue
			}
			var l struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Items []map[string]interface{} `json:"items"`
			}
			if res.err != nil || res.code != 200 || json.Unmarshal(res.body, &l) != nil || l.Metadata.ResourceVersion == "" {
				if !r.wait() {
					return
				}
				continue
			}
			if lists++; lists > 1 {
				// a relist: a list answered after the first one (the attempts that failed are
				// failed requests)
				r.c.log.write(r.kind("relist"), map[string]interface{}{"watch": r.name, "from": listRV})
			}
			if r.keepLast {
				if len(l.Items) > 0 {
					r.keep(l.Items[0])
				} else {
					r.keep(nil)
				}
			}
			rv, listRV = l.Metadata.ResourceVersion, "-"
		}
		switch r.watch(&rv) {
		case "rewatch":
		case "backoff-rewatch":
			if !r.wait() {
				return
			}
		case "relist":
			// a watch that ended with an error, a 410 among them: ListAndWatch returns, the
			// backoff, then a list from the last synced resourceVersion
			listRV = rv
			if !r.wait() {
				return
			}
		}
	}
}

// start sends the watch request as client-go's Request.Watch does: an error that is a probable
// EOF or a timeout is tried again after 1 s, up to 10 times, then taken for an empty watch (which
// the reflector sees as a very short one); so is an answer with Retry-After (429, 5xx).
func (r *reflector) start(u string) (*http.Response, error) {
	for retries := 0; ; retries++ {
		req, _ := http.NewRequestWithContext(r.c.ctx, "GET", u, nil)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "drill-"+r.c.who+" (client-go model)")
		resp, err := r.c.hc.Do(req)
		retryable := err != nil && (isProbableEOF(err) || isTimeout(err))
		if err == nil && resp.StatusCode != 200 && resp.Header.Get("Retry-After") != "" {
			resp.Body.Close()
			retryable, err = true, fmt.Errorf("watch answered %d with Retry-After", resp.StatusCode)
		}
		if !retryable || r.c.ctx.Err() != nil {
			return resp, err
		}
		if retries == 9 {
			return nil, errEmptyWatch{err}
		}
		if !sleep(r.c.ctx, time.Second) {
			return nil, r.c.ctx.Err()
		}
	}
}

type errEmptyWatch struct{ error }

// watch runs one watch from *rv and says what the reflector does next: "rewatch" (at once),
// "backoff-rewatch" (connection refused or 429), "relist" (after a backoff, from *rv: any other
// error, a 410, or a watch that ended in under a second with no event, client-go's "very short
// watch").
func (r *reflector) watch(rv *string) string {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	q.Set("watch", "true")
	q.Set("resourceVersion", *rv)
	q.Set("allowWatchBookmarks", "true")
	// minWatchTimeout 5 m, times 1 to 2 at random
	q.Set("timeoutSeconds", strconv.Itoa(int((300 + rand.Float64()*300))))
	t0 := time.Now()
	resp, err := r.start(r.c.base + r.path + "?" + q.Encode())
	if r.c.ctx.Err() != nil {
		return "stop"
	}
	ms := time.Since(t0).Milliseconds()
	if err != nil {
		r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": false, "watch": r.name, "err": trim(err.Error()),
			"ms": ms, "hung": ms >= requestTimeout.Milliseconds()})
		var empty errEmptyWatch
		if isConnectionRefused(err) && !errors.As(err, &empty) {
			return "backoff-rewatch"
		}
		return "relist"
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": false, "watch": r.name, "code": resp.StatusCode,
			"ms": ms})
		if resp.StatusCode == 429 {
			return "backoff-rewatch"
		}
		return "relist"
	}
	r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": true, "watch": r.name, "rv": *rv, "proto": resp.Proto})
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	events, lastLogged := 0, time.Time{}
	next := "rewatch"
	for sc.Scan() {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		var meta struct {
			Code     int `json:"code"`
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || json.Unmarshal(ev.Object, &meta) != nil {
			next = "relist"
			break
		}
		if ev.Type == "ERROR" {
			if meta.Code == 410 {
				r.c.log.write(r.kind("watch-expired"), map[string]interface{}{"watch": r.name, "code": 410})
			}
			next = "relist"
			break
		}
		events++
		*rv = meta.Metadata.ResourceVersion
		if r.keepLast && (ev.Type == "ADDED" || ev.Type == "MODIFIED") {
			var obj map[string]interface{}
			if json.Unmarshal(ev.Object, &obj) == nil {
				r.keep(obj)
			}
		} else if r.keepLast && ev.Type == "DELETED" {
			r.keep(nil)
		}
		if r.logEvents && ev.Type != "BOOKMARK" && time.Since(lastLogged) >= 500*time.Millisecond {
			lastLogged = time.Now()
			r.c.log.write(r.kind("watch-event"), map[string]interface{}{"rv": *rv})
		}
	}
	err = sc.Err()
	if r.c.ctx.Err() != nil {
		return "stop"
	}
	// streamwatcher.go: a probable EOF or a timeout ends the watch quietly; anything else is an
	// error event
	if err != nil && !isProbableEOF(err) && !isTimeout(err) && next == "rewatch" {
		next = "relist"
	}
	if next == "rewatch" && time.Since(t0) < time.Second && events == 0 {
		next, err = "relist", errors.New("very short watch")
	}
	kv := map[string]interface{}{"ok": next == "rewatch", "watch": r.name, "events": events, "next": next}
	if err != nil {
		kv["err"] = trim(err.Error())
	}
	r.c.log.write(r.kind("watch-end"), kv)
	return next
}
