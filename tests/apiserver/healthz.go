// SPDX-License-Identifier: Apache-2.0
// /livez, /readyz, /healthz in kube-apiserver's format.
//
// The body format is handleRootHealth and adaptCheckToHandler of k8s.io/apiserver
// pkg/server/healthz/healthz.go: "[+]NAME ok", "[+]NAME excluded: ok", "[-]NAME failed: reason
// withheld", the "warn: some health checks cannot be excluded" line, then "NAME check passed"
// (verbose) or plain "ok", and on failure http.Error(w, "...NAME check failed", 500) (http.Error
// adds the newline and the text/plain and nosniff headers). Which check goes where follows the
// registration: pkg/server/config.go (ping, log for all three), pkg/server/options/etcd.go
// (AddHealthChecks "etcd": healthz, livez and readyz; AddReadyzChecks "etcd-readiness": readyz
// only), pkg/server/config.go (informer-sync: readyz), pkg/server/hooks.go (poststarthook/NAME:
// all three), pkg/server/genericapiserver.go (shutdown: readyz only, signalled at
// ShutdownInitiated).
package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

type healthCheck struct {
	name  string
	group string // NamedGroupedCheck's group ("" for ungrouped checks)
	check func(r *http.Request) error
}

// The post-start hooks a kube-apiserver registers, a representative subset (names from
// kube-apiserver's /readyz?verbose; each is done once the stand-in serves).
var postStartHooks = []string{
	"start-apiserver-admission-initializer",
	"generic-apiserver-start-informers",
	"priority-and-fairness-config-consumer",
	"priority-and-fairness-filter",
	"storage-object-count-tracker-hook",
	"start-system-namespaces-controller",
	"bootstrap-controller",
	"rbac/bootstrap-roles",
	"scheduling/bootstrap-system-priority-classes",
	"start-cluster-authentication-info-controller",
	"start-kube-apiserver-identity-lease-controller",
	"aggregator-reload-proxy-client-cert",
	"apiservice-registration-controller",
}

func (s *server) healthChecks() (healthz, livez, readyz []healthCheck) {
	ok := func(*http.Request) error { return nil }
	ping := healthCheck{name: "ping", check: ok}
	logc := healthCheck{name: "log", check: ok}
	etcdCheck := s.etcdCheck(s.opt.healthcheckTimeout)
	readyCheck := s.etcdCheck(s.opt.readycheckTimeout)
	etcd := healthCheck{name: "etcd", group: "etcd", check: func(r *http.Request) error { return etcdCheck(r) }}
	etcdReady := healthCheck{name: "etcd-readiness", group: "etcd-readiness", check: func(r *http.Request) error { return readyCheck(r) }}
	informer := healthCheck{name: "informer-sync", check: ok}
	shutdown := healthCheck{name: "shutdown", check: func(*http.Request) error {
		if s.life.initiated() {
			return fmt.Errorf("process is shutting down")
		}
		return nil
	}}
	hooks := []healthCheck{}
	for _, h := range postStartHooks {
		hooks = append(hooks, healthCheck{name: "poststarthook/" + h, check: ok})
	}
	for i := 1; i <= s.opt.extraHooks; i++ { // --extra-poststart-hooks: a longer body, as more hooks make it
		hooks = append(hooks, healthCheck{name: fmt.Sprintf("poststarthook/extra-%d", i), check: ok})
	}
	healthz = append([]healthCheck{ping, logc, etcd}, hooks...)
	livez = append([]healthCheck{ping, logc, etcd}, hooks...)
	readyz = append(append([]healthCheck{ping, logc, etcd, etcdReady, informer}, hooks...), shutdown)
	return
}

// etcdCheck: one read bounded by timeout (--etcd-healthcheck-timeout for "etcd",
// --etcd-readycheck-timeout for "etcd-readiness"). With --etcd-servers it is rate-limited as
// newETCD3Check (storagebackend/factory/etcd3.go) limits it: at most one read per timeout/2
// (rate.Every(timeout/2), burst 1), the other calls answered with the last result, and calls
// serialized by its lock. With --store every call asks the store (README.md, "Not rate-limited").
func (s *server) etcdCheck(timeout time.Duration) func(r *http.Request) error {
	if s.opt.etcdServers == "" {
		return func(r *http.Request) error { return s.store.ping(r.Context(), timeout) }
	}
	var mu sync.Mutex
	var last time.Time
	var lastErr error
	return func(*http.Request) error {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && time.Since(last) < timeout/2 {
			return lastErr
		}
		last = time.Now()
		lastErr = s.store.ping(context.Background(), timeout)
		return lastErr
	}
}

// installHealth registers PATH and PATH/CHECK for each check, as InstallPathHandler does.
func installHealth(mux *http.ServeMux, path string, checks []healthCheck) {
	mux.Handle(path, rootHealth(path[1:], checks))
	for _, c := range checks {
		c := c
		mux.Handle(path+"/"+c.name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := c.check(r); err != nil {
				http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "ok")
		}))
	}
}

func rootHealth(name string, checks []healthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excluded := map[string]bool{}
		for _, e := range r.URL.Query()["exclude"] {
			excluded[e] = true
		}
		unknown := map[string]bool{}
		for e := range excluded {
			unknown[e] = true
		}
		var out bytes.Buffer
		var failed []string
		for _, c := range checks {
			if excluded[c.name] {
				delete(unknown, c.name)
				fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.name)
				continue
			}
			if c.group != "" && excluded[c.group] {
				delete(unknown, c.group)
				fmt.Fprintf(&out, "[+]%s excluded with %s: ok\n", c.name, c.group)
				continue
			}
			if err := c.check(r); err != nil {
				fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.name)
				failed = append(failed, c.name)
			} else {
				fmt.Fprintf(&out, "[+]%s ok\n", c.name)
			}
		}
		if len(unknown) > 0 {
			names := []string{}
			for n := range unknown {
				names = append(names, fmt.Sprintf("%q", n)) // formatQuoted: sorted, quoted, comma-joined
			}
			sort.Strings(names)
			fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(names, ","))
		}
		if len(failed) > 0 {
			http.Error(w, fmt.Sprintf("%s%s check failed", out.String(), name), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, ok := r.URL.Query()["verbose"]; !ok {
			fmt.Fprint(w, "ok")
			return
		}
		out.WriteTo(w)
		fmt.Fprintf(w, "%s check passed\n", name)
	})
}
