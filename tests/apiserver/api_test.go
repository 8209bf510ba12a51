// SPDX-License-Identifier: Apache-2.0
// Authentication, Status bodies, discovery, configmaps, watch framing, bookmarks, 410 Expired,
// resume on a second apiserver, and the protobuf create body kubectl sends.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Status bodies, as metav1.Status marshals (k8s.io/apimachinery pkg/apis/meta/v1/types.go field
// order) with the messages of k8s.io/apimachinery pkg/api/errors/errors.go.
const (
	status401     = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`
	status403     = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"","reason":"Forbidden","details":{"kind":"configmaps"},"code":403}`
	status403Path = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/readyz/etcd\"","reason":"Forbidden","details":{},"code":403}`
	status404     = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"nosuch\" not found","reason":"NotFound","details":{"name":"nosuch","kind":"configmaps"},"code":404}`
	status409     = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"dup\" already exists","reason":"AlreadyExists","details":{"name":"dup","kind":"configmaps"},"code":409}`
	// pkg/storage/cacher/watch_cache_history.go: "too old resource version: %d (%d)", in an ERROR event.
	event410 = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: %d (%d)","reason":"Expired","code":410}}`
	// A BOOKMARK: an empty object of the kind with only its resourceVersion (creationTimestamp is
	// a metav1.Time without omitempty: null).
	eventBookmark = `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"%d","creationTimestamp":null}}}`
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	k := getPKI(t)
	sock := startStore(t, 100)
	s := startServer(t, sock)
	anon := startServer(t, sock, "--anonymous-auth=true")
	none := newClient(t, nil, false)
	untrusted := newClient(t, &k.untrusted, false)

	for _, c := range []*http.Client{none, untrusted} {
		for _, p := range []string{"/readyz", "/version", "/api/v1/namespaces/default/configmaps"} {
			r := do(t, c, "GET", s.url(p), "")
			expect(t, "401 "+p, fmt.Sprint(r.code, " ", r.body), "401 "+status401+"\n")
			expect(t, "401 Content-Type", r.hdr.Get("Content-Type"), "application/json")
		}
	}
	// Anonymous on: what system:public-info-viewer grants, 403 elsewhere.
	for _, p := range []string{"/readyz", "/livez", "/healthz", "/version"} {
		expect(t, "anonymous "+p, do(t, none, "GET", anon.url(p), "").code, 200)
	}
	r := do(t, untrusted, "GET", anon.url("/api/v1/namespaces/default/configmaps"), "")
	expect(t, "anonymous list", fmt.Sprint(r.code, " ", r.body), "403 "+status403+"\n")
	r = do(t, none, "GET", anon.url("/readyz/etcd"), "")
	expect(t, "anonymous /readyz/etcd", fmt.Sprint(r.code, " ", r.body), "403 "+status403Path+"\n")
	// A verified certificate: CN and O are the user (the request is allowed).
	expect(t, "admin", do(t, adminClient(t), "GET", s.url("/api/v1/namespaces/default/configmaps"), "").code, 200)
}

func TestConfigMapsAndDiscovery(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100))
	c := adminClient(t)

	var v map[string]string
	json.Unmarshal([]byte(do(t, c, "GET", s.url("/version"), "").body), &v)
	expect(t, "version", v["major"]+"."+v["minor"]+" "+v["gitVersion"], "1.32 v1.32.0")
	for path, kind := range map[string]string{"/api": "APIVersions", "/api/v1": "APIResourceList", "/apis": "APIGroupList",
		"/apis/discovery.k8s.io": "APIGroup", "/apis/discovery.k8s.io/v1": "APIResourceList"} {
		var m map[string]interface{}
		r := do(t, c, "GET", s.url(path), "")
		json.Unmarshal([]byte(r.body), &m)
		expect(t, path+" kind", fmt.Sprint(r.code, " ", m["kind"]), "200 "+kind)
	}

	cm := createCM(t, c, s, "team-a", "dup")
	md := cm["metadata"].(map[string]interface{})
	if md["uid"] == "" || md["creationTimestamp"] == nil || md["resourceVersion"] == "" || md["namespace"] != "team-a" {
		t.Errorf("created object lacks server fields: %v", md)
	}
	r := do(t, c, "POST", s.url("/api/v1/namespaces/team-a/configmaps"), `{"metadata":{"name":"dup"}}`)
	expect(t, "409", fmt.Sprint(r.code, " ", r.body), "409 "+status409+"\n")
	r = do(t, c, "GET", s.url("/api/v1/namespaces/team-a/configmaps/nosuch"), "")
	expect(t, "404", fmt.Sprint(r.code, " ", r.body), "404 "+status404+"\n")
	r = do(t, c, "GET", s.url("/api/v1/namespaces/team-a/configmaps/dup"), "")
	expect(t, "get", r.code, 200)
	var list struct {
		Kind     string
		Metadata struct{ ResourceVersion string }
		Items    []map[string]interface{}
	}
	json.Unmarshal([]byte(do(t, c, "GET", s.url("/api/v1/namespaces/team-a/configmaps"), "").body), &list)
	if list.Kind != "ConfigMapList" || list.Metadata.ResourceVersion == "" || len(list.Items) != 1 || list.Items[0]["kind"] != nil {
		t.Errorf("list: %+v", list)
	}
}

// What a kubelet reads: its Node (cluster-scoped) and the pods bound to it, by the field
// selector spec.nodeName (pkg/kubelet/config/apiserver.go), across namespaces.
func TestNodesAndPodsByNodeName(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100))
	c := adminClient(t)
	expect(t, "node create", do(t, c, "POST", s.url("/api/v1/nodes"), `{"metadata":{"name":"n1"}}`).code, 201)
	expect(t, "node get", do(t, c, "GET", s.url("/api/v1/nodes/n1"), "").code, 200)
	for i, node := range []string{"n1", "n2", "n1"} {
		body := fmt.Sprintf(`{"metadata":{"name":"p%d"},"spec":{"nodeName":"%s"}}`, i, node)
		expect(t, "pod create", do(t, c, "POST", s.url(fmt.Sprintf("/api/v1/namespaces/ns%d/pods", i)), body).code, 201)
	}
	var list struct {
		Kind  string
		Items []struct{ Metadata struct{ Name string } }
	}
	json.Unmarshal([]byte(do(t, c, "GET", s.url("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"), "").body), &list)
	var names []string
	for _, it := range list.Items {
		names = append(names, it.Metadata.Name)
	}
	expect(t, "pods on n1", list.Kind+" "+strings.Join(names, ","), "PodList p0,p2")
	r := do(t, c, "GET", s.url("/api/v1/nodes?fieldSelector=spec.nodeName%3Dn1"), "")
	expect(t, "spec.nodeName on nodes", fmt.Sprint(r.code, " ", strings.Contains(r.body, "field label not supported: spec.nodeName")), "400 true")
}

// kubectl create configmap sends protobuf (client-go's clientset default).
func TestProtobufCreate(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100))
	c := adminClient(t)
	pb := func(num int, b []byte) []byte { return append(append([]byte{byte(num<<3 | 2)}, byte(len(b))), b...) }
	entry := append(pb(1, []byte("a")), pb(2, []byte("b"))...)
	meta := pb(1, []byte("from-proto"))
	raw := append(pb(1, meta), pb(2, entry)...)
	typeMeta := append(pb(1, []byte("v1")), pb(2, []byte("ConfigMap"))...)
	body := append([]byte("k8s\x00"), append(pb(1, typeMeta), pb(2, raw)...)...)
	req, _ := http.NewRequest("POST", s.url("/api/v1/namespaces/default/configmaps"), bytesReader(body))
	req.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var o struct {
		Metadata struct{ Name string }
		Data     map[string]string
	}
	json.Unmarshal(b, &o)
	expect(t, "protobuf create", fmt.Sprint(resp.StatusCode, " ", o.Metadata.Name, " ", o.Data["a"]), "201 from-proto b")
}

// watchReader reads a watch response line by line.
type watchReader struct {
	resp  *http.Response
	lines chan string
}

type watchEv struct {
	Type   string
	Object struct {
		Kind     string
		Metadata struct{ Name, ResourceVersion string }
	}
	raw string
}

func openWatch(t *testing.T, c *http.Client, url string) *watchReader {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", url, resp.StatusCode, b)
	}
	w := &watchReader{resp: resp, lines: make(chan string, 1000)}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return w
}

func (w *watchReader) next(t *testing.T, timeout time.Duration) watchEv {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			t.Fatal("watch ended")
		}
		var ev watchEv
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("watch line %q: %v", l, err)
		}
		ev.raw = l
		return ev
	case <-time.After(timeout):
		t.Fatalf("no watch event within %v", timeout)
	}
	return watchEv{}
}

// ends: the stream closes (any lines before are skipped) within timeout.
func (w *watchReader) ends(t *testing.T, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-w.lines:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func TestWatchFramingBookmarksExpired(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 5), "--watch-bookmark-interval", "300ms")
	c := adminClient(t)
	resp, err := c.Get(s.url("/api/v1/namespaces/w/configmaps?watch=true&allowWatchBookmarks=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	expect(t, "watch Content-Type", resp.Header.Get("Content-Type"), "application/json")
	expect(t, "watch chunked", fmt.Sprint(resp.TransferEncoding), "[chunked]")
	cm := createCM(t, c, s, "w", "one")
	rv, _ := strconv.Atoi(cm["metadata"].(map[string]interface{})["resourceVersion"].(string))
	br := bufio.NewReader(resp.Body)
	l, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]json.RawMessage
	json.Unmarshal([]byte(l), &ev)
	expect(t, "event framing", regexp.MustCompile(`^\{"type":"ADDED","object":\{"kind":"ConfigMap","apiVersion":"v1","metadata":\{"name":"one","namespace":"w","uid":"[0-9a-f-]{36}","resourceVersion":"`+strconv.Itoa(rv)+`","creationTimestamp":"[0-9TZ:-]+"\},"data":\{"k":"v"\}\}\}\n$`).MatchString(l), true)
	if t.Failed() {
		t.Logf("line: %q", l)
	}
	l, err = br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var bm watchEv
	json.Unmarshal([]byte(l), &bm)
	brv, _ := strconv.Atoi(bm.Object.Metadata.ResourceVersion)
	if brv < rv {
		t.Errorf("bookmark resourceVersion %d before the last event's %d", brv, rv)
	}
	expect(t, "bookmark", l, fmt.Sprintf(eventBookmark, brv)+"\n")

	// History of 5 events: after 10 more writes, a watch from rv is too old.
	for i := 0; i < 10; i++ {
		createCM(t, c, s, "w", fmt.Sprintf("more-%d", i))
	}
	w := openWatch(t, c, s.url(fmt.Sprintf("/api/v1/namespaces/w/configmaps?watch=1&resourceVersion=%d", rv)))
	e := w.next(t, 5*time.Second)
	if m := regexp.MustCompile(`too old resource version: \d+ \((\d+)\)`).FindStringSubmatch(e.raw); m == nil {
		t.Errorf("expired event: %s", e.raw)
	} else {
		compact, _ := strconv.Atoi(m[1])
		expect(t, "410 event", e.raw, fmt.Sprintf(event410, rv, compact))
	}
	if !w.ends(t, 2*time.Second) {
		t.Error("the watch did not end after the ERROR event")
	}
	// timeoutSeconds ends the stream.
	start := time.Now()
	w = openWatch(t, c, s.url("/api/v1/namespaces/w/configmaps?watch=1&timeoutSeconds=1&resourceVersion="+strconv.Itoa(rv+10)))
	if !w.ends(t, 3*time.Second) || time.Since(start) < 900*time.Millisecond {
		t.Errorf("timeoutSeconds=1: the watch ended after %v", time.Since(start))
	}
}

// A watch resumed on another apiserver from its last resourceVersion: no gap, no duplicate.
func TestWatchResumeOnOtherServer(t *testing.T) {
	t.Parallel()
	sock := startStore(t, 1000)
	a, b := startServer(t, sock), startServer(t, sock)
	c := adminClient(t)
	w := openWatch(t, c, a.url("/api/v1/namespaces/resume/configmaps?watch=1&resourceVersion=1"))
	const n = 40
	created := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			req, _ := http.NewRequest("POST", b.url("/api/v1/namespaces/resume/configmaps"),
				strings.NewReader(fmt.Sprintf(`{"metadata":{"name":"cm-%02d"}}`, i)))
			resp, err := c.Do(req)
			if err != nil {
				created <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 {
				created <- fmt.Errorf("create %d: %s", i, resp.Status)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		created <- nil
	}()
	defer func() {
		if err := <-created; err != nil {
			t.Error(err)
		}
	}()
	seen := []string{}
	last := ""
	for len(seen) < 15 {
		ev := w.next(t, 5*time.Second)
		seen, last = append(seen, ev.Object.Metadata.Name), ev.Object.Metadata.ResourceVersion
	}
	w.resp.Body.Close()
	w2 := openWatch(t, c, b.url("/api/v1/namespaces/resume/configmaps?watch=1&resourceVersion="+last))
	for len(seen) < n {
		ev := w2.next(t, 5*time.Second)
		seen = append(seen, ev.Object.Metadata.Name)
	}
	for i, name := range seen {
		expect(t, fmt.Sprintf("event %d", i), name, fmt.Sprintf("cm-%02d", i))
	}
}

func bytesReader(b []byte) io.Reader { return &byteReader{b} }

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
