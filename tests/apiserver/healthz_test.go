// SPDX-License-Identifier: Apache-2.0
// The health endpoints byte for byte against the format of k8s.io/apiserver
// pkg/server/healthz/healthz.go (handleRootHealth, adaptCheckToHandler), and the etcd-lost
// lifecycle: readyz and livez fail [-]etcd (AddHealthChecks in pkg/server/options/etcd.go puts
// "etcd" in livez too), API requests hang then 504, watches end, restore recovers.
package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// Format strings of pkg/server/healthz/healthz.go, quoted.
const (
	fmtOK        = "[+]%s ok\n"                      // fmt.Fprintf(&individualCheckOutput, "[+]%s ok\n", check.Name())
	fmtExcluded  = "[+]%s excluded: ok\n"            // "[+]%s excluded: ok\n"
	fmtFailed    = "[-]%s failed: reason withheld\n" // "[-]%s failed: reason withheld\n"
	fmtPassed    = "%s check passed\n"               // fmt.Fprintf(w, "%s check passed\n", name)
	fmtFailedEnd = "%s check failed\n"               // http.Error(w, fmt.Sprintf("%s%s check failed", ...), 500); http.Error adds "\n"
	fmtWarn      = "warn: some health checks cannot be excluded: no matches for %s\n"
	bodyOK       = "ok" // fmt.Fprint(w, "ok")
	ctPlain      = "text/plain; charset=utf-8"
)

func hookLines(format string) string {
	var b strings.Builder
	for _, h := range postStartHooks {
		fmt.Fprintf(&b, format, "poststarthook/"+h)
	}
	return b.String()
}

func line(format string, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, format, n)
	}
	return b.String()
}

func TestHealthzFormats(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100))
	c := adminClient(t)

	for _, p := range []string{"/readyz", "/livez", "/healthz"} {
		r := do(t, c, "GET", s.url(p), "")
		expect(t, p+" code", r.code, 200)
		expect(t, p+" body", r.body, bodyOK)
		expect(t, p+" Content-Type", r.hdr.Get("Content-Type"), ctPlain)
		expect(t, p+" nosniff", r.hdr.Get("X-Content-Type-Options"), "nosniff")
	}
	readyz := line(fmtOK, "ping", "log", "etcd", "etcd-readiness", "informer-sync") + hookLines(fmtOK) + line(fmtOK, "shutdown") + fmt.Sprintf(fmtPassed, "readyz")
	livez := line(fmtOK, "ping", "log", "etcd") + hookLines(fmtOK) + fmt.Sprintf(fmtPassed, "livez")
	healthz := line(fmtOK, "ping", "log", "etcd") + hookLines(fmtOK) + fmt.Sprintf(fmtPassed, "healthz")
	expect(t, "readyz?verbose", do(t, c, "GET", s.url("/readyz?verbose"), "").body, readyz)
	expect(t, "livez?verbose", do(t, c, "GET", s.url("/livez?verbose"), "").body, livez)
	expect(t, "healthz?verbose", do(t, c, "GET", s.url("/healthz?verbose"), "").body, healthz)

	// ?exclude: by name; an unknown name gets the warn line (verbose shows it).
	want := line(fmtOK, "ping", "log") + line(fmtExcluded, "etcd") + hookLines(fmtOK) +
		fmt.Sprintf(fmtWarn, `"nosuch"`) + fmt.Sprintf(fmtPassed, "livez")
	expect(t, "livez?verbose&exclude=etcd&exclude=nosuch", do(t, c, "GET", s.url("/livez?verbose&exclude=etcd&exclude=nosuch"), "").body, want)
	// per-check paths: adaptCheckToHandler writes "ok".
	expect(t, "/readyz/etcd", do(t, c, "GET", s.url("/readyz/etcd"), "").body, bodyOK)
	expect(t, "/livez/ping", do(t, c, "GET", s.url("/livez/ping"), "").body, bodyOK)
}

func TestEtcdLost(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--etcd-request-timeout", "1s")
	c := adminClient(t)
	createCM(t, c, s, "default", "before")

	// A watch in progress, to see it end.
	wr := openWatch(t, c, s.url("/api/v1/namespaces/default/configmaps?watch=1"))
	if ev := wr.next(t, 5*time.Second); ev.Type != "ADDED" {
		t.Fatalf("first event %+v", ev)
	}

	s.post(t, "/etcd/lose")
	s.waitLog(`event=etcd-lost`, 2*time.Second)
	if !wr.ends(t, 3*time.Second) {
		t.Error("the watch did not end when etcd was lost")
	}

	r := do(t, c, "GET", s.url("/readyz"), "")
	wantReady := line(fmtOK, "ping", "log") + line(fmtFailed, "etcd", "etcd-readiness") + line(fmtOK, "informer-sync") +
		hookLines(fmtOK) + line(fmtOK, "shutdown") + fmt.Sprintf(fmtFailedEnd, "readyz")
	expect(t, "readyz code (etcd lost)", r.code, 500)
	expect(t, "readyz body (etcd lost)", r.body, wantReady)
	expect(t, "readyz Content-Type", r.hdr.Get("Content-Type"), ctPlain)
	expect(t, "readyz nosniff", r.hdr.Get("X-Content-Type-Options"), "nosniff")
	// The real apiserver registers "etcd" with AddHealthChecks: livez fails too.
	r = do(t, c, "GET", s.url("/livez"), "")
	expect(t, "livez code (etcd lost)", r.code, 500)
	expect(t, "livez body (etcd lost)", r.body, line(fmtOK, "ping", "log")+line(fmtFailed, "etcd")+hookLines(fmtOK)+fmt.Sprintf(fmtFailedEnd, "livez"))
	// Excluding the etcd group makes readyz pass again (the way some load balancers probe).
	expect(t, "readyz?exclude=etcd&exclude=etcd-readiness", do(t, c, "GET", s.url("/readyz?exclude=etcd&exclude=etcd-readiness"), "").code, 200)
	// adaptCheckToHandler: "internal server error: %v" with the error itself.
	r = do(t, c, "GET", s.url("/readyz/etcd"), "")
	expect(t, "/readyz/etcd (etcd lost)", fmt.Sprint(r.code, " ", r.body), "500 internal server error: etcd client connection lost\n")

	// API requests hang for the timeout, then 504 Timeout (finisher.go's message).
	start := time.Now()
	r = do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps"), "")
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("request failed after %v, before the 1s etcd timeout", el)
	}
	expect(t, "504 Status", fmt.Sprint(r.code, " ", r.body),
		`504 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: request did not complete within requested timeout - context deadline exceeded","reason":"Timeout","details":{},"code":504}`+"\n")
	st := s.state(t)
	expect(t, "state etcd", st["etcd"], "lost")

	// A request waiting when etcd comes back succeeds.
	done := make(chan response, 1)
	go func() { done <- do(t, c, "GET", s.url("/api/v1/namespaces/default/configmaps/before"), "") }()
	time.Sleep(200 * time.Millisecond)
	s.post(t, "/etcd/restore")
	s.waitLog(`event=etcd-restored`, 2*time.Second)
	expect(t, "request across the restore", (<-done).code, 200)
	expect(t, "readyz after restore", do(t, c, "GET", s.url("/readyz"), "").body, bodyOK)
}

// --extra-poststart-hooks: each hook one more "[+]" line; past 2048 bytes net/http sends the
// failing /readyz chunked (no Content-Length), as kube-apiserver does with enough hooks.
func TestExtraPostStartHooksMakeAChunkedFailure(t *testing.T) {
	t.Parallel()
	s := startServer(t, startStore(t, 100), "--extra-poststart-hooks", "80")
	c := adminClient(t)
	extra := ""
	for i := 1; i <= 80; i++ {
		extra += fmt.Sprintf(fmtOK, fmt.Sprintf("poststarthook/extra-%d", i))
	}
	want := line(fmtOK, "ping", "log", "etcd", "etcd-readiness", "informer-sync") + hookLines(fmtOK) + extra +
		line(fmtOK, "shutdown") + fmt.Sprintf(fmtPassed, "readyz")
	expect(t, "readyz?verbose", do(t, c, "GET", s.url("/readyz?verbose"), "").body, want)

	s.post(t, "/etcd/lose")
	s.waitLog(`event=etcd-lost`, 2*time.Second)
	resp, err := c.Get(s.url("/readyz"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	wantFailed := line(fmtOK, "ping", "log") + line(fmtFailed, "etcd", "etcd-readiness") + line(fmtOK, "informer-sync") +
		hookLines(fmtOK) + extra + line(fmtOK, "shutdown") + fmt.Sprintf(fmtFailedEnd, "readyz")
	expect(t, "readyz code (etcd lost)", resp.StatusCode, 500)
	expect(t, "readyz body (etcd lost)", string(b), wantFailed)
	if len(b) <= 2048 {
		t.Errorf("body of %d bytes, want more than 2048", len(b))
	}
	expect(t, "Transfer-Encoding", strings.Join(resp.TransferEncoding, ","), "chunked")
	expect(t, "Content-Length", resp.ContentLength, int64(-1))
	if _, err := serveFlags([]string{"--tls-cert-file", "c", "--tls-private-key-file", "k", "--extra-poststart-hooks", "-1"}); err == nil {
		t.Error("--extra-poststart-hooks -1 accepted")
	}
}
