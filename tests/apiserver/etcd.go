// SPDX-License-Identifier: Apache-2.0
// etcdClient: the store ops, the health check and watches against a real etcd 3.4 through its v3 HTTP/JSON gateway.
//
// `serve --etcd-servers http://IP:2379` stores through etcd as kube-apiserver does
// (k8s.io/apiserver pkg/storage/etcd3/store.go): keys /registry/RESOURCE/NAMESPACE/NAME (the
// namespace segment left out for cluster-scoped kinds), the object's JSON as the value,
// resourceVersion = the key's mod_revision, a list's resourceVersion = the response header's
// revision. create is a txn "mod_revision == 0 then put else get" (store.go Create), an update a
// txn "mod_revision == RV then put else get" (GuaranteedUpdate), a TTL a lease granted for the
// write (lease_manager.go). Watches are /v3/watch streams from start_revision = RV+1 (watcher.go);
// a compacted start revision ends the stream with an EXPIRED event (410 Expired upstream).
//
// The gateway (etcd 3.4 serves /v3/ and /v3beta/; /v3alpha/ is gone) speaks the proto3 JSON
// mapping: bytes in base64, int64 as strings, zero values left out. Its errors are
// {"error","message","code"} with the gRPC code.
//
// Failures as kube-apiserver's clientv3 meets them: a read (range) that cannot reach etcd is
// retried until the request's deadline (clientv3's retry interceptor retries Unavailable on
// repeatable RPCs), then errStoreTimeout -> 504; an error etcd answers ("etcdserver: request timed
// out", "etcdserver: no leader") is returned as is -> 500 with etcd's text
// (responsewriters/status.go convertStorageErrorOrNot); a write that cannot connect fails at once.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// etcdError is an error etcd itself answered (the gateway's {"error":...}).
type etcdError struct {
	Msg  string `json:"message"`
	Code int    `json:"code"`
}

func (e *etcdError) Error() string { return e.Msg }

type etcdClient struct {
	lossSwitch
	base   string // http://IP:2379
	http   *http.Client
	stream *http.Client

	leaseMu sync.Mutex
	leases  map[string]int64 // key -> the lease its last TTL'd write holds (keepalive)
}

func newEtcdClient(servers string, timeout time.Duration) (*etcdClient, error) {
	first := strings.Split(servers, ",")[0]
	if !strings.HasPrefix(first, "http://") {
		return nil, fmt.Errorf("--etcd-servers %q: want http://HOST:PORT", servers)
	}
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	return &etcdClient{
		lossSwitch: lossSwitch{timeout: timeout},
		base:       strings.TrimSuffix(first, "/"),
		http:       &http.Client{Transport: tr},
		stream:     &http.Client{Transport: tr},
		leases:     map[string]int64{},
	}, nil
}

// etcdKey maps a store key (RESOURCE/NAMESPACE/NAME, RESOURCE//NAME when cluster-scoped) or
// prefix to etcd's /registry/... key.
func etcdKey(k string) string {
	return "/registry/" + strings.Replace(k, "//", "/", 1)
}

func storeKeyOf(k string) string { return strings.TrimPrefix(k, "/registry/") }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is clientv3.GetPrefixRangeEnd: the prefix with its last byte incremented.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

type etcdHeader struct {
	Revision int64 `json:"revision,string"`
}

type etcdKV struct {
	Key            []byte `json:"key"`
	Value          []byte `json:"value"`
	CreateRevision int64  `json:"create_revision,string"`
	ModRevision    int64  `json:"mod_revision,string"`
}

type etcdRange struct {
	Header etcdHeader `json:"header"`
	KVs    []etcdKV   `json:"kvs"`
}

type etcdTxn struct {
	Header    etcdHeader `json:"header"`
	Succeeded bool       `json:"succeeded"`
	Responses []struct {
		Range *etcdRange `json:"response_range"`
	} `json:"responses"`
}

type etcdDelete struct {
	Header  etcdHeader `json:"header"`
	Deleted int64      `json:"deleted,string"`
	PrevKVs []etcdKV   `json:"prev_kvs"`
}

type etcdLease struct {
	Header etcdHeader `json:"header"`
	ID     string     `json:"ID"`
	TTL    int64      `json:"TTL,string"`
}

// call POSTs one gateway request. Connection failures come back as *net.OpError / url errors;
// etcd's own errors as *etcdError.
func (c *etcdClient) call(ctx context.Context, path string, req interface{}, resp interface{}) error {
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, "POST", c.base+path, bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	r, err := c.http.Do(hr)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if r.StatusCode != 200 {
		e := &etcdError{}
		if json.Unmarshal(b, e) != nil || e.Msg == "" {
			e.Msg = fmt.Sprintf("etcd %s: %s", path, strings.TrimSpace(string(b)))
		}
		return e
	}
	return json.Unmarshal(b, resp)
}

// read runs a repeatable request, retrying connection failures until ctx ends.
func (c *etcdClient) read(ctx context.Context, path string, req, resp interface{}) error {
	for {
		err := c.call(ctx, path, req, resp)
		var ee *etcdError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		if ctx.Err() != nil {
			return errStoreTimeout
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return errStoreTimeout
		}
	}
}

func kvOf(kv etcdKV) storeKV {
	return storeKV{Key: storeKeyOf(string(kv.Key)), Rev: kv.ModRevision, Obj: json.RawMessage(kv.Value)}
}

func (c *etcdClient) do(ctx context.Context, op storeOp) (storeReply, error) {
	if err := c.gate(ctx); err != nil {
		return storeReply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := c.do1(ctx, op)
	if err != nil && ctx.Err() != nil {
		var ee *etcdError
		if !errors.As(err, &ee) {
			err = errStoreTimeout
		}
	}
	return r, err
}

func (c *etcdClient) do1(ctx context.Context, op storeOp) (storeReply, error) {
	key := etcdKey(op.Key)
	switch op.Op {
	case "rev", "get":
		if op.Op == "rev" {
			key = "/registry/health"
		}
		var rr etcdRange
		if err := c.read(ctx, "/v3/kv/range", map[string]string{"key": b64(key)}, &rr); err != nil {
			return storeReply{}, err
		}
		if op.Op == "rev" {
			return storeReply{Rev: rr.Header.Revision}, nil
		}
		if len(rr.KVs) == 0 {
			return storeReply{Rev: rr.Header.Revision, Err: "notfound"}, nil
		}
		kv := kvOf(rr.KVs[0])
		return storeReply{Rev: rr.Header.Revision, KV: &kv}, nil
	case "list":
		p := etcdKey(op.Prefix)
		var rr etcdRange
		if err := c.read(ctx, "/v3/kv/range", map[string]string{"key": b64(p), "range_end": b64(prefixEnd(p))}, &rr); err != nil {
			return storeReply{}, err
		}
		r := storeReply{Rev: rr.Header.Revision, Items: []storeKV{}}
		for _, kv := range rr.KVs {
			r.Items = append(r.Items, kvOf(kv))
		}
		return r, nil
	case "create", "put", "update":
		put := map[string]interface{}{"key": b64(key), "value": base64.StdEncoding.EncodeToString(op.Obj)}
		var lease int64
		if op.TTLms > 0 {
			ttl := (op.TTLms + 999) / 1000
			var lr etcdLease
			if err := c.call(ctx, "/v3/lease/grant", map[string]int64{"TTL": ttl}, &lr); err != nil {
				return storeReply{}, err
			}
			lease, _ = strconv.ParseInt(lr.ID, 10, 64)
			put["lease"] = lr.ID
		}
		var cmp []interface{}
		switch {
		case op.Op == "create":
			cmp = []interface{}{map[string]string{"target": "MOD", "key": b64(key), "result": "EQUAL", "mod_revision": "0"}}
		case op.Op == "update" && op.Rev != 0:
			cmp = []interface{}{map[string]string{"target": "MOD", "key": b64(key), "result": "EQUAL", "mod_revision": strconv.FormatInt(op.Rev, 10)}}
		case op.Op == "update":
			cmp = []interface{}{map[string]string{"target": "CREATE", "key": b64(key), "result": "GREATER", "create_revision": "0"}}
		}
		var tr etcdTxn
		txn := map[string]interface{}{"compare": cmp,
			"success": []interface{}{map[string]interface{}{"request_put": put}},
			"failure": []interface{}{map[string]interface{}{"request_range": map[string]string{"key": b64(key)}}}}
		if err := c.call(ctx, "/v3/kv/txn", txn, &tr); err != nil {
			return storeReply{}, err
		}
		if !tr.Succeeded {
			var cur []etcdKV
			if len(tr.Responses) > 0 && tr.Responses[0].Range != nil {
				cur = tr.Responses[0].Range.KVs
			}
			if len(cur) == 0 {
				return storeReply{Rev: tr.Header.Revision, Err: "notfound"}, nil
			}
			kv := kvOf(cur[0])
			e := "conflict"
			if op.Op == "create" {
				e = "exists"
			}
			return storeReply{Rev: tr.Header.Revision, Err: e, KV: &kv}, nil
		}
		c.leaseMu.Lock()
		if lease != 0 {
			c.leases[op.Key] = lease
		} else {
			delete(c.leases, op.Key)
		}
		c.leaseMu.Unlock()
		return storeReply{Rev: tr.Header.Revision, KV: &storeKV{Key: op.Key, Rev: tr.Header.Revision, Obj: op.Obj}}, nil
	case "keepalive":
		c.leaseMu.Lock()
		lease, ok := c.leases[op.Key]
		c.leaseMu.Unlock()
		if !ok {
			return storeReply{Err: "notfound"}, nil
		}
		var kr struct {
			Result etcdLease `json:"result"`
		}
		if err := c.call(ctx, "/v3/lease/keepalive", map[string]string{"ID": strconv.FormatInt(lease, 10)}, &kr); err != nil {
			return storeReply{}, err
		}
		if kr.Result.TTL <= 0 { // the lease has expired, and its keys with it
			c.leaseMu.Lock()
			delete(c.leases, op.Key)
			c.leaseMu.Unlock()
			return storeReply{Rev: kr.Result.Header.Revision, Err: "notfound"}, nil
		}
		return storeReply{Rev: kr.Result.Header.Revision}, nil
	case "delete":
		var dr etcdDelete
		if err := c.call(ctx, "/v3/kv/deleterange", map[string]interface{}{"key": b64(key), "prev_kv": true}, &dr); err != nil {
			return storeReply{}, err
		}
		if dr.Deleted == 0 || len(dr.PrevKVs) == 0 {
			return storeReply{Rev: dr.Header.Revision, Err: "notfound"}, nil
		}
		kv := kvOf(dr.PrevKVs[0])
		kv.Rev = dr.Header.Revision
		return storeReply{Rev: dr.Header.Revision, KV: &kv}, nil
	}
	return storeReply{Err: "bad op " + op.Op}, nil
}

// ping is kube-apiserver's etcd check (storagebackend/factory/etcd3.go newETCD3Check): a Get of
// /registry/health, linearizable (etcd's default), bounded by timeout; "error getting data from
// etcd: ..." otherwise. While the control endpoint has etcd "lost" it fails at once.
func (c *etcdClient) ping(ctx context.Context, timeout time.Duration) error {
	if c.isLost() {
		return errors.New("etcd client connection lost")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rr etcdRange
	err := c.call(ctx, "/v3/kv/range", map[string]string{"key": b64("/registry/health")}, &rr)
	if err != nil {
		if ctx.Err() != nil {
			err = context.DeadlineExceeded
		}
		return fmt.Errorf("error getting data from etcd: %w", err)
	}
	return nil
}

type etcdWatchResponse struct {
	Result struct {
		Header          etcdHeader `json:"header"`
		Created         bool       `json:"created"`
		Canceled        bool       `json:"canceled"`
		CompactRevision int64      `json:"compact_revision,string"`
		CancelReason    string     `json:"cancel_reason"`
		Events          []struct {
			Type   string  `json:"type"` // "" (PUT, proto3's zero value) or "DELETE"
			KV     etcdKV  `json:"kv"`
			PrevKV *etcdKV `json:"prev_kv"`
		} `json:"events"`
	} `json:"result"`
	Error *etcdError `json:"error"`
}

// watch opens one /v3/watch stream from revision from+1 with prev_kv (a DELETED event carries the
// object) and progress_notify: etcd then sends a progress notification (header.revision, no
// events) to an idle watch every --experimental-watch-progress-notify-interval (10m by default),
// which the stand-in's bookmarks carry. progress is unused here: etcd 3.4's gateway answers a
// watch only once the request body has ended, so a WatchProgressRequest cannot follow the
// create request on the same stream (seen with etcd 3.4.23); without notifications a bookmark
// carries the revision of the last event sent.
func (c *etcdClient) watch(ctx context.Context, prefix string, from int64, _ time.Duration, out chan<- storeEvent) error {
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
	p := etcdKey(prefix)
	create, _ := json.Marshal(map[string]interface{}{"create_request": map[string]interface{}{
		"key": b64(p), "range_end": b64(prefixEnd(p)), "start_revision": strconv.FormatInt(from+1, 10),
		"progress_notify": true, "prev_kv": true}})
	pr := bytes.NewReader(create)
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/v3/watch", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.stream.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("etcd watch: %s", resp.Status)
	}
	send := func(ev storeEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var wr etcdWatchResponse
		if err := json.Unmarshal(sc.Bytes(), &wr); err != nil {
			return err
		}
		if wr.Error != nil {
			return wr.Error
		}
		res := wr.Result
		switch {
		case res.Canceled && res.CompactRevision > 0:
			send(storeEvent{Type: "EXPIRED", Rev: res.CompactRevision})
			return nil
		case res.Canceled:
			return fmt.Errorf("etcd watch canceled: %s", res.CancelReason)
		case res.Created:
			continue
		case len(res.Events) == 0:
			if !send(storeEvent{Type: "PROGRESS", Rev: res.Header.Revision}) {
				return ctx.Err()
			}
			continue
		}
		for _, e := range res.Events {
			ev := storeEvent{Key: storeKeyOf(string(e.KV.Key)), Rev: e.KV.ModRevision, Obj: json.RawMessage(e.KV.Value)}
			switch {
			case e.Type == "DELETE":
				ev.Type = "DELETED"
				if e.PrevKV != nil {
					ev.Obj = json.RawMessage(e.PrevKV.Value)
				}
			case e.KV.CreateRevision == e.KV.ModRevision:
				ev.Type = "ADDED"
			default:
				ev.Type = "MODIFIED"
			}
			if !send(ev) {
				return ctx.Err()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return ctx.Err()
}
