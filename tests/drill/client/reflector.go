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
	"time"
)

type reflector struct {
	c          *client
	name, path string
	query      url.Values
	logEvents  bool // log "watch-event" (at most one per 0.5 s) for the watch-gap figure
	backoff    time.Duration
	lastBackon time.Time
}

func newReflector(c *client, name, path string, q url.Values, logEvents bool) *reflector {
	if q == nil {
		q = url.Values{}
	}
	return &reflector{c: c, name: name, path: path, query: q, logEvents: logEvents}
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

// run: the first list asks for resourceVersion=0 (the watch cache); a later one for the last
// synced resourceVersion, or "" (a quorum read from etcd) after a 410 (relistResourceVersion).
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
			res := r.c.do(r.kind("list"), "GET", r.path+"?"+q.Encode(), nil, requestTimeout)
			var l struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
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
			rv, listRV = l.Metadata.ResourceVersion, "-"
		}
		next, err := r.watch(&rv)
		switch next {
		case "rewatch":
		case "backoff-rewatch":
			if !r.wait() {
				return
			}
		case "relist":
			listRV = rv
			if !r.wait() {
				return
			}
		case "expired":
			listRV = ""
			if !r.wait() {
				return
			}
		}
		_ = err
	}
}

// watch runs one watch from *rv and says what the reflector does next: "rewatch" (at once),
// "backoff-rewatch" (connection refused or 429), "relist" (after a backoff, from *rv: any other
// error, or a watch that ended in under a second with no event, client-go's "very short watch"),
// "expired" (a 410: list again from etcd).
func (r *reflector) watch(rv *string) (string, error) {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	q.Set("watch", "true")
	q.Set("resourceVersion", *rv)
	q.Set("allowWatchBookmarks", "true")
	// minWatchTimeout 5 m, times 1 to 2 at random
	q.Set("timeoutSeconds", strconv.Itoa(int((300 + rand.Float64()*300))))
	req, _ := http.NewRequestWithContext(r.c.ctx, "GET", r.c.base+r.path+"?"+q.Encode(), nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "drill-"+r.c.who+" (client-go model)")
	t0 := time.Now()
	resp, err := r.c.hc.Do(req)
	if r.c.ctx.Err() != nil {
		return "stop", nil
	}
	if err != nil {
		r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": false, "watch": r.name, "err": trim(err.Error()),
			"ms": time.Since(t0).Milliseconds()})
		if isConnectionRefused(err) {
			return "backoff-rewatch", err
		}
		return "relist", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": false, "watch": r.name, "code": resp.StatusCode,
			"ms": time.Since(t0).Milliseconds()})
		if resp.StatusCode == 429 {
			return "backoff-rewatch", nil
		}
		return "relist", fmt.Errorf("watch answered %d", resp.StatusCode)
	}
	r.c.log.write(r.kind("watch-start"), map[string]interface{}{"ok": true, "watch": r.name, "rv": *rv, "proto": resp.Proto})
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	events, lastLogged := 0, time.Time{}
	next := "rewatch"
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Code     int `json:"code"`
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			next = "relist"
			break
		}
		if ev.Type == "ERROR" {
			if ev.Object.Code == 410 {
				r.c.log.write(r.kind("watch-expired"), map[string]interface{}{"watch": r.name, "code": 410})
				next = "expired"
			} else {
				next = "relist"
			}
			break
		}
		events++
		*rv = ev.Object.Metadata.ResourceVersion
		if r.logEvents && ev.Type != "BOOKMARK" && time.Since(lastLogged) >= 500*time.Millisecond {
			lastLogged = time.Now()
			r.c.log.write(r.kind("watch-event"), map[string]interface{}{"rv": *rv})
		}
	}
	err = sc.Err()
	if r.c.ctx.Err() != nil {
		return "stop", nil
	}
	if err != nil && !isProbableEOF(err) && next == "rewatch" {
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
	return next, err
}
