// SPDX-License-Identifier: Apache-2.0
// The --etcd-servers mode against real etcd processes (/usr/bin/etcd, skipped without it): CRUD, conflicts, watch resume and compaction, a Lease watch's live renewals, the node slice's lease, /readyz when etcd stops or loses quorum.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const etcdBin = "/usr/bin/etcd"

type etcdProc struct {
	name, client, peer string // client and peer URLs
	cmd                *exec.Cmd
	done               chan struct{}
	logf               string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcdCluster starts n members of one etcd cluster on 127.0.0.1 random ports, each in its
// own data directory, and waits until each answers a linearizable range.
func startEtcdCluster(t *testing.T, n int) []*etcdProc {
	t.Helper()
	if _, err := os.Stat(etcdBin); err != nil {
		t.Skip("no " + etcdBin)
	}
	dir := t.TempDir()
	ms := make([]*etcdProc, n)
	var initial []string
	for i := range ms {
		ms[i] = &etcdProc{name: fmt.Sprintf("m%d", i), client: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			peer: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), done: make(chan struct{})}
		initial = append(initial, ms[i].name+"="+ms[i].peer)
	}
	for _, m := range ms {
		m.logf = filepath.Join(dir, m.name+".log")
		lf, _ := os.Create(m.logf)
		m.cmd = exec.Command(etcdBin, "--name", m.name, "--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "kas-test", "--pre-vote=true",
			"--experimental-watch-progress-notify-interval", "300ms")
		m.cmd.Stdout, m.cmd.Stderr = lf, lf
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m := m
		go func() { m.cmd.Wait(); lf.Close(); close(m.done) }()
		t.Cleanup(func() {
			m.cmd.Process.Signal(syscall.SIGCONT)
			m.cmd.Process.Kill()
			<-m.done
			if t.Failed() {
				b, _ := os.ReadFile(m.logf)
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("etcd %s log tail:\n%s", m.name, b)
			}
		})
	}
	for _, m := range ms {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := etcdCall(m.client, "/v3/kv/range", `{"key":"`+b64("/registry/health")+`"}`); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd %s not ready within 20s", m.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ms
}

func etcdCall(base, path, body string) (map[string]interface{}, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	var m map[string]interface{}
	return m, json.Unmarshal(b, &m)
}

func (m *etcdProc) signal(sig syscall.Signal) { m.cmd.Process.Signal(sig) }

// startEtcdServer: a stand-in on etcd at url (requests time out after 1 s).
func startEtcdServer(t *testing.T, url string, extra ...string) *apiserver {
	t.Helper()
	k := getPKI(t)
	args := []string{"serve", "--etcd-servers", url, "--tls-cert-file", k.certFile, "--tls-private-key-file", k.keyFile,
		"--client-ca-file", k.caFile, "--secure-port", "0", "--control-address", "127.0.0.1:0", "--etcd-request-timeout", "1s"}
	p := startProc(t, append(args, extra...)...)
	c := p.waitLog(`event=control-listening address=(\S+)`, 10*time.Second)
	l := p.waitLog(`event=listening address=(\S+)`, 10*time.Second)
	return &apiserver{proc: p, addr: l[1], control: "http://" + c[1]}
}

func decode(t *testing.T, r response) map[string]interface{} {
	t.Helper()
	var m map[string]interface{}
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func meta(m map[string]interface{}, field string) string {
	md, _ := m["metadata"].(map[string]interface{})
	s, _ := md[field].(string)
	return s
}

// The API's objects live in etcd under /registry/RESOURCE/NAMESPACE/NAME with resourceVersion =
// mod_revision; create conflicts give 409 AlreadyExists, a stale resourceVersion 409 Conflict.
func TestEtcdCRUD(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 1)
	s := startEtcdServer(t, ms[0].client)
	c := adminClient(t)
	cm := createCM(t, c, s, "default", "a")
	rv := meta(cm, "resourceVersion")
	kv, err := etcdCall(ms[0].client, "/v3/kv/range", `{"key":"`+b64("/registry/configmaps/default/a")+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	kvs, _ := kv["kvs"].([]interface{})
	if len(kvs) != 1 {
		t.Fatalf("etcd has no /registry/configmaps/default/a: %v", kv)
	}
	expect(t, "resourceVersion = mod_revision", rv, kvs[0].(map[string]interface{})["mod_revision"])
	val, _ := base64.StdEncoding.DecodeString(kvs[0].(map[string]interface{})["value"].(string))
	if !bytes.Contains(val, []byte(`"data":{"k":"v"}`)) {
		t.Errorf("etcd value %s", val)
	}
	ns, _ := etcdCall(ms[0].client, "/v3/kv/range", `{"key":"`+b64("/registry/namespaces/kube-node-lease")+`"}`)
	if ns["kvs"] == nil {
		t.Errorf("namespace kube-node-lease not at /registry/namespaces/kube-node-lease")
	}

	get := decode(t, do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps/a"), ""))
	expect(t, "get resourceVersion", meta(get, "resourceVersion"), rv)
	r := do(t, c, "POST", s.url("/api/v1/namespaces/default/configmaps"), `{"metadata":{"name":"a"}}`)
	expect(t, "create again", fmt.Sprint(r.code, " ", decode(t, r)["reason"]), "409 AlreadyExists")
	createCM(t, c, s, "default", "b")
	list := decode(t, do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps"), ""))
	items, _ := list["items"].([]interface{})
	expect(t, "list length", len(items), 2)
	if lrv, _ := strconv.Atoi(meta(list, "resourceVersion")); fmt.Sprint(lrv) != meta(list, "resourceVersion") || lrv <= atoi(rv) {
		t.Errorf("list resourceVersion %s not after %s", meta(list, "resourceVersion"), rv)
	}

	upd := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":%q},"data":{"k":"w"}}`, rv)
	r = do(t, c, "PUT", s.url("/api/v1/namespaces/default/configmaps/a"), upd)
	if r.code != 200 {
		t.Fatalf("update: %d %s", r.code, r.body)
	}
	u := decode(t, r)
	expect(t, "update keeps uid", meta(u, "uid"), meta(cm, "uid"))
	if meta(u, "resourceVersion") == rv {
		t.Errorf("update did not change resourceVersion")
	}
	r = do(t, c, "PUT", s.url("/api/v1/namespaces/default/configmaps/a"), upd) // rv is stale now
	st := decode(t, r)
	expect(t, "stale update", fmt.Sprint(r.code, " ", st["reason"]), "409 Conflict")
	expect(t, "conflict message", st["message"], `Operation cannot be fulfilled on configmaps "a": the object has been modified; please apply your changes to the latest version and try again`)
	r = do(t, c, "PUT", s.url("/api/v1/namespaces/default/configmaps/nope"), `{"metadata":{"name":"nope"}}`)
	expect(t, "update of a missing object", r.code, 404)

	// A node Lease as the kubelet renews it: create, then update with the resourceVersion read.
	r = do(t, c, "POST", s.url("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"),
		`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1"},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40}}`)
	expect(t, "lease create", r.code, 201)
	l := decode(t, r)
	r = do(t, c, "PUT", s.url("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
		fmt.Sprintf(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1","resourceVersion":%q},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40,"renewTime":"2026-01-01T00:00:00.000000Z"}}`, meta(l, "resourceVersion")))
	expect(t, "lease renew", r.code, 200)

	r = do(t, c, "DELETE", s.url("/api/v1/namespaces/default/configmaps/a"), "")
	expect(t, "delete", r.code, 200)
	r = do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps/a"), "")
	expect(t, "get after delete", r.code, 404)
	r = do(t, c, "DELETE", s.url("/api/v1/namespaces/default/configmaps/a"), "")
	expect(t, "delete again", r.code, 404)
}

// A watch from resourceVersion N resumes with the changes after N (etcd start_revision N+1);
// after etcd compacted N away it gets the 410 Expired ERROR event.
func TestEtcdWatchResumeAndCompaction(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 1)
	s := startEtcdServer(t, ms[0].client, "--watch-bookmark-interval", "300ms")
	c := adminClient(t)
	rv1 := meta(createCM(t, c, s, "w", "a"), "resourceVersion")
	createCM(t, c, s, "w", "b")
	do(t, c, "DELETE", s.url("/api/v1/namespaces/w/configmaps/a"), "")
	w := openWatch(t, c, s.url("/api/v1/namespaces/w/configmaps?watch=1&timeoutSeconds=5&allowWatchBookmarks=true&resourceVersion="+rv1))
	var got []string
	for len(got) < 2 {
		ev := w.next(t, 5*time.Second)
		if ev.Type != "BOOKMARK" {
			got = append(got, ev.Type+" "+ev.Object.Metadata.Name)
		}
	}
	expect(t, "events after rv1", got, []string{"ADDED b", "DELETED a"})
	createCM(t, c, s, "w", "c")
	ev := w.next(t, 5*time.Second)
	for ev.Type == "BOOKMARK" {
		ev = w.next(t, 5*time.Second)
	}
	expect(t, "live event", ev.Type+" "+ev.Object.Metadata.Name, "ADDED c")
	// A bookmark follows within the bookmark interval, at the revision of the last change at least.
	ev = w.next(t, 5*time.Second)
	for ev.Type != "BOOKMARK" {
		ev = w.next(t, 5*time.Second)
	}

	hdr, err := etcdCall(ms[0].client, "/v3/kv/range", `{"key":"`+b64("x")+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	rev := hdr["header"].(map[string]interface{})["revision"].(string)
	if _, err := etcdCall(ms[0].client, "/v3/kv/compaction", `{"revision":"`+rev+`","physical":true}`); err != nil {
		t.Fatal(err)
	}
	w2 := openWatch(t, c, s.url("/api/v1/namespaces/w/configmaps?watch=1&timeoutSeconds=5&resourceVersion="+rv1))
	e := w2.next(t, 5*time.Second)
	expect(t, "compacted watch", e.Type, "ERROR")
	if !strings.Contains(e.raw, `"code":410`) || !strings.Contains(e.raw, `"reason":"Expired"`) || !strings.Contains(e.raw, "too old resource version: "+rv1) {
		t.Errorf("compacted watch event: %s", e.raw)
	}
	if !w2.ends(t, 3*time.Second) {
		t.Error("the compacted watch did not end")
	}
}

// The drill's Lease watch: a watch of kube-node-lease opened at the list's resourceVersion (no
// history to replay) gets each renewal of a node Lease live, as MODIFIED at the PUT's
// resourceVersion. A stand-in whose etcd watch kept its request body open (for progress requests)
// got nothing: etcd 3.4's gateway answers /v3/watch only once the body has ended.
func TestEtcdLeaseWatchLive(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 1)
	s := startEtcdServer(t, ms[0].client)
	c := adminClient(t)
	base := "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
	r := do(t, c, "POST", s.url(base), `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1"},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40}}`)
	expect(t, "lease create", r.code, 201)
	rv := meta(decode(t, r), "resourceVersion")
	list := decode(t, do(t, c, "GET", s.url(base), ""))
	w := openWatch(t, c, s.url(base+"?watch=1&timeoutSeconds=20&allowWatchBookmarks=true&resourceVersion="+meta(list, "resourceVersion")))
	for i := 0; i < 3; i++ {
		r = do(t, c, "PUT", s.url(base+"/n1"), fmt.Sprintf(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1","resourceVersion":%q},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40,"renewTime":"2026-01-01T00:00:0%d.000000Z"}}`, rv, i))
		expect(t, "lease renew", r.code, 200)
		rv = meta(decode(t, r), "resourceVersion")
		ev := w.next(t, 3*time.Second)
		for ev.Type == "BOOKMARK" {
			ev = w.next(t, 3*time.Second)
		}
		expect(t, "renewal event", ev.Type+" "+ev.Object.Kind+" "+ev.Object.Metadata.Name+" "+ev.Object.Metadata.ResourceVersion, "MODIFIED Lease n1 "+rv)
	}
}

// kubernetes-NODE carries zone and nodeName, stays at one resourceVersion while its lease is kept
// alive, and is gone within about the TTL once its apiserver is killed.
func TestEtcdNodeSliceLease(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 1)
	testNodeSliceLease(t, func(extra ...string) *apiserver { return startEtcdServer(t, ms[0].client, extra...) })
}

// The same with the unix-socket store (its TTL'd keys and keep-alive op).
func TestStoreNodeSliceLease(t *testing.T) {
	t.Parallel()
	sock := startStore(t, 1000)
	testNodeSliceLease(t, func(extra ...string) *apiserver { return startServer(t, sock, extra...) })
}

func testNodeSliceLease(t *testing.T, start func(extra ...string) *apiserver) {
	s := start("--node-name", "cp-a", "--zone", "a", "--endpoint-lease-ttl", "3s", "--endpoint-reconcile-interval", "500ms")
	other := start()
	c := adminClient(t)
	path := "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes-cp-a"
	var r response
	deadline := time.Now().Add(5 * time.Second)
	for r = do(t, c, "GET", other.url(path), ""); r.code != 200 && time.Now().Before(deadline); r = do(t, c, "GET", other.url(path), "") {
		time.Sleep(50 * time.Millisecond)
	}
	if r.code != 200 {
		t.Fatalf("no slice: %d %s", r.code, r.body)
	}
	var sl struct {
		Metadata struct {
			ResourceVersion string
			Labels          map[string]string
		}
		AddressType string
		Endpoints   []struct {
			Addresses  []string
			Conditions map[string]bool
			NodeName   string
			Zone       string
		}
		Ports []struct{ Port int }
	}
	json.Unmarshal([]byte(r.body), &sl)
	_, port, _ := net.SplitHostPort(s.addr)
	expect(t, "slice", fmt.Sprint(sl.Metadata.Labels["kubernetes.io/service-name"], " ", sl.AddressType, " ", sl.Endpoints, " ", sl.Ports),
		fmt.Sprintf("kubernetes IPv4 [{[127.0.0.1] map[ready:true] cp-a a}] [{%s}]", port))
	// The stand-in without --node-name keeps the shared slice (once its first reconcile is
	// done); the one with it has its own.
	var names []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		list := decode(t, do(t, c, "GET", other.url("/apis/discovery.k8s.io/v1/endpointslices?labelSelector=kubernetes.io/service-name%3Dkubernetes"), ""))
		items, _ := list["items"].([]interface{})
		names = []string{}
		for _, it := range items {
			names = append(names, meta(it.(map[string]interface{}), "name"))
		}
		if len(names) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	expect(t, "slices of the service", names, []string{"kubernetes", "kubernetes-cp-a"})

	// Kept alive across several reconciles (TTL 3 s, 4 s here) without a rewrite.
	wait := time.Now().Add(4 * time.Second)
	for time.Now().Before(wait) {
		time.Sleep(200 * time.Millisecond)
	}
	r2 := decode(t, do(t, c, "GET", other.url(path), ""))
	expect(t, "resourceVersion after 4 s of keep-alives", meta(r2, "resourceVersion"), sl.Metadata.ResourceVersion)

	s.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	deadline = killed.Add(10 * time.Second)
	for do(t, c, "GET", other.url(path), "").code != 404 {
		if time.Now().After(deadline) {
			t.Fatal("slice still there 10 s after its apiserver was killed (lease TTL 3 s)")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slice gone %v after SIGKILL (lease TTL 3s)", time.Since(killed).Round(10*time.Millisecond))
}

// readyzUntil polls /readyz until its status is want; it returns the elapsed time and the last body.
func readyzUntil(t *testing.T, c *http.Client, s *apiserver, want int, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	for {
		r := do(t, c, "GET", s.url("/readyz?verbose"), "")
		if r.code == want {
			return time.Since(start), r.body
		}
		if time.Since(start) > limit {
			t.Fatalf("/readyz not %d within %v: %d %s", want, limit, r.code, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// etcd stopped (SIGSTOP: the socket still accepts, nothing answers): /readyz fails "[-]etcd"
// within the checks' timeouts (1 s cached + 2 s "etcd" + 2 s "etcd-readiness"), requests 504 after
// --etcd-request-timeout; after SIGCONT it is ready again.
func TestEtcdStoppedFailsReadyz(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 1)
	s := startEtcdServer(t, ms[0].client)
	c := adminClient(t)
	readyzUntil(t, c, s, 200, 5*time.Second)
	ms[0].signal(syscall.SIGSTOP)
	took, body := readyzUntil(t, c, s, 500, 8*time.Second)
	if !strings.Contains(body, "[-]etcd failed: reason withheld") {
		t.Errorf("readyz body:\n%s", body)
	}
	t.Logf("/readyz failed %v after SIGSTOP", took.Round(10*time.Millisecond))
	// The check answers from its last result for 1 s (timeout/2), then "etcd" and
	// "etcd-readiness" each wait their 2 s in turn, as kube-apiserver's do: about 5 s at worst.
	if took > 6*time.Second {
		t.Errorf("/readyz took %v to fail (want 1 s + 2 x 2 s at most)", took)
	}
	r := do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps/x"), "")
	expect(t, "get with etcd stopped", fmt.Sprint(r.code, " ", decode(t, r)["reason"]), "504 Timeout")
	r = do(t, c, "POST", s.url("/api/v1/namespaces/default/configmaps"), `{"metadata":{"name":"y"}}`)
	expect(t, "create with etcd stopped", fmt.Sprint(r.code, " ", decode(t, r)["reason"]), "504 Timeout")
	ms[0].signal(syscall.SIGCONT)
	took, _ = readyzUntil(t, c, s, 200, 8*time.Second)
	t.Logf("/readyz ready %v after SIGCONT", took.Round(10*time.Millisecond))
}

// A member cut from quorum (the other two stopped) still accepts connections, but its
// linearizable reads cannot complete: its stand-in's /readyz fails; the quorum back, it recovers.
func TestEtcdMemberWithoutQuorumFailsReadyz(t *testing.T) {
	t.Parallel()
	ms := startEtcdCluster(t, 3)
	s := startEtcdServer(t, ms[0].client)
	patient := startEtcdServer(t, ms[0].client, "--etcd-request-timeout", "15s")
	c := adminClient(t)
	readyzUntil(t, c, s, 200, 5*time.Second)
	ms[1].signal(syscall.SIGSTOP)
	ms[2].signal(syscall.SIGSTOP)
	took, body := readyzUntil(t, c, s, 500, 10*time.Second)
	if !strings.Contains(body, "[-]etcd failed") {
		t.Errorf("readyz body:\n%s", body)
	}
	t.Logf("/readyz failed %v after the quorum was lost", took.Round(10*time.Millisecond))
	r := do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps/x"), "")
	expect(t, "get without quorum", fmt.Sprint(r.code, " ", decode(t, r)["reason"]), "504 Timeout")
	// With a request timeout longer than etcd's own, etcd's error comes through: 500, its text.
	start := time.Now()
	r = do(t, c, "GET", patient.url("/api/v1/namespaces/default/configmaps/x"), "")
	st := decode(t, r)
	t.Logf("get without quorum, 15 s request timeout: %d %v %q after %v", r.code, st["reason"], st["message"], time.Since(start).Round(10*time.Millisecond))
	if r.code != 500 || st["reason"] != nil || !strings.HasPrefix(fmt.Sprint(st["message"]), "etcdserver: ") {
		t.Errorf("want 500, no reason, etcd's error text: %s", r.body)
	}
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(ms[0].client, "http://"), time.Second)
	if err != nil {
		t.Errorf("the member cut from quorum does not accept TCP: %v", err)
	} else {
		conn.Close()
	}
	ms[1].signal(syscall.SIGCONT)
	ms[2].signal(syscall.SIGCONT)
	took, _ = readyzUntil(t, c, s, 200, 15*time.Second)
	t.Logf("/readyz ready %v after the quorum came back", took.Round(10*time.Millisecond))
}

// --shared-endpointslice: a stand-in with --node-name writes the shared kubernetes slice too, as
// kube-apiserver does, so that clients that read only it (Deckhouse's proxy) find the apiserver.
func TestSharedSliceBesideNodeSlice(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 1000), "--node-name", "cp-a", "--zone", "a", "--shared-endpointslice",
		"--endpoint-reconcile-interval", "200ms")
	c := adminClient(t)
	got := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		list := decode(t, do(t, c, "GET", s.url("/apis/discovery.k8s.io/v1/endpointslices?labelSelector=kubernetes.io/service-name%3Dkubernetes"), ""))
		items, _ := list["items"].([]interface{})
		var names []string
		for _, it := range items {
			m := it.(map[string]interface{})
			eps, _ := json.Marshal(m["endpoints"])
			names = append(names, meta(m, "name")+" "+string(eps))
		}
		if got = strings.Join(names, "; "); len(names) == 2 {
			break
		}
	}
	expect(t, "both slices", got, `kubernetes [{"addresses":["127.0.0.1"],"conditions":{"ready":true}}]; `+
		`kubernetes-cp-a [{"addresses":["127.0.0.1"],"conditions":{"ready":true},"nodeName":"cp-a","zone":"a"}]`)
}
