// SPDX-License-Identifier: Apache-2.0
// kprism-apiserver: a stand-in for kube-apiserver on Go's own TLS and HTTP/2 stack, for kprism's
// tests. Two modes:
//
//	kprism-apiserver store --listen unix:PATH         the shared store ("etcd")
//	kprism-apiserver serve --store unix:PATH FLAGS    one apiserver on the shared store
//	kprism-apiserver serve --etcd-servers URL FLAGS   one apiserver on a real etcd (etcd.go)
//
// Flags, the control endpoint and what is left out: README.md. Lifecycle events are logged one
// per line on stderr, "kprism-apiserver: event=NAME key=value ...", for tests to wait on.
//
// Graceful termination follows pkg/server/genericapiserver.go (k8s.io/apiserver,
// NonBlockingRunWithContext and the lifecycle signals of lifecycle_signals.go): SIGTERM ->
// ShutdownInitiated (/readyz fails "[-]shutdown", pre-shutdown hooks: the endpoint lease is
// removed) -> --shutdown-delay-duration of normal serving -> AfterShutdownDelayDuration /
// NotAcceptingNewRequest: the listener is closed at once (http.Server.Shutdown), or with
// --shutdown-send-retry-after the server keeps listening and answers new requests 429 with
// Retry-After: 5 and Connection: close (pkg/server/filters/with_retry_after.go) until the requests
// in flight have drained, then shuts down with a 2 s timeout -> InFlightRequestsDrained (the
// watches are ended: --shutdown-watch-termination-grace-period defaults to 0) -> exit 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"crypto/x509"
)

type options struct {
	bindAddress        string
	securePort         int
	certFile, keyFile  string
	clientCAFile       string
	tlsMaxVersion      uint16
	anonymous          bool
	storeAddr          string
	etcdServers        string
	healthcheckTimeout time.Duration
	readycheckTimeout  time.Duration
	nodeName, zone     string
	sharedSlice        bool
	controlAddr        string
	etcdTimeout        time.Duration
	shutdownDelay      time.Duration
	sendRetryAfter     bool
	goawayChance       float64
	leaseTTL           time.Duration
	reconcileInterval  time.Duration
	bookmarkInterval   time.Duration
	progressInterval   time.Duration
	minRequestTimeout  time.Duration
	version            string
	name               string
	logConnections     bool
	extraHooks         int
}

type server struct {
	opt       options
	clientCAs *x509.CertPool
	store     storage
	life      *lifecycle
}

var logName = "kprism-apiserver"

// logEvent writes one lifecycle line: "kprism-apiserver[: NAME]: event=EVENT k=v ...".
func logEvent(event string, kv ...string) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: event=%s", logName, event)
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		if strings.ContainsAny(v, " \"") || v == "" {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", kv[i], v)
	}
	log.Print(b.String())
}

func goVersion() string { return runtime.Version() }

func (s *server) advertise() string {
	return net.JoinHostPort(s.opt.bindAddress, strconv.Itoa(s.opt.securePort))
}

// lifecycle: the shutdown phases, the requests in flight and the watches.
type lifecycle struct {
	shutdownInitiated chan struct{}
	notAccepting      chan struct{}
	phase             atomic.Value // string
	inflight          sync.WaitGroup
	inflightN         atomic.Int64

	mu      sync.Mutex
	watches map[*context.CancelFunc]bool
	ended   bool // no new watches
	watchWG sync.WaitGroup
}

func newLifecycle() *lifecycle {
	l := &lifecycle{shutdownInitiated: make(chan struct{}), notAccepting: make(chan struct{}), watches: map[*context.CancelFunc]bool{}}
	l.phase.Store("serving")
	return l
}

func (l *lifecycle) initiated() bool {
	select {
	case <-l.shutdownInitiated:
		return true
	default:
		return false
	}
}

func (l *lifecycle) addWatch(cancel context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.watches[&cancel] = true
	l.watchWG.Add(1)
	return true
}

func (l *lifecycle) doneWatch() { l.watchWG.Done() }

func (l *lifecycle) endWatches() int {
	l.mu.Lock()
	l.ended = true
	n := 0
	for c := range l.watches {
		(*c)()
		n++
	}
	l.mu.Unlock()
	l.watchWG.Wait()
	return n
}

func (l *lifecycle) activeWatches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.watches)
}

// The handler chain, outermost first, in the order of DefaultBuildHandlerChain
// (pkg/server/config.go): goaway, retry-after, the in-flight wait group, authentication and
// authorization, the mux.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	hz, lz, rz := s.healthChecks()
	installHealth(mux, "/healthz", hz)
	installHealth(mux, "/livez", lz)
	installHealth(mux, "/readyz", rz)
	s.installAPI(mux)
	var h http.Handler = s.withAuth(mux)
	h = s.withWaitGroup(h)
	if s.opt.sendRetryAfter {
		h = s.withRetryAfter(h)
	}
	return withServedBy(withGoaway(h, s.opt.goawayChance), s.opt.name)
}

func (s *server) withWaitGroup(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWatch(r) { // long-running: tracked by the watch registry instead
			inner.ServeHTTP(w, r)
			return
		}
		s.life.inflight.Add(1)
		s.life.inflightN.Add(1)
		defer func() { s.life.inflightN.Add(-1); s.life.inflight.Done() }()
		inner.ServeHTTP(w, r)
	})
}

var retryAfterExempt = []string{"/readyz", "/livez", "/healthz", "/metrics"}

func (s *server) withRetryAfter(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.life.notAccepting:
		default:
			inner.ServeHTTP(w, r)
			return
		}
		exempt := strings.HasPrefix(r.UserAgent(), "kube-apiserver/")
		for _, p := range retryAfterExempt {
			exempt = exempt || strings.HasPrefix(r.URL.Path, p)
		}
		if exempt {
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "5")
		http.Error(w, "The apiserver is shutting down, please try again later.", http.StatusTooManyRequests)
	})
}

// control is the plain-HTTP test endpoint: POST /etcd/lose, POST /etcd/restore, POST /shutdown
// (as SIGTERM), GET /state.
func (s *server) control(shutdown func()) http.Handler {
	mux := http.NewServeMux()
	post := func(path string, f func()) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "POST" {
				http.Error(w, "POST only", http.StatusMethodNotAllowed)
				return
			}
			f()
			fmt.Fprintln(w, "ok")
		})
	}
	post("/etcd/lose", func() {
		if !s.store.isLost() {
			s.store.setLost(true)
			logEvent("etcd-lost")
		}
	})
	post("/etcd/restore", func() {
		if s.store.isLost() {
			s.store.setLost(false)
			logEvent("etcd-restored")
		}
	})
	post("/shutdown", shutdown)
	mux.HandleFunc("/state", func(w http.ResponseWriter, r *http.Request) {
		etcd := "ok"
		if s.store.isLost() {
			etcd = "lost"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]interface{}{
			"address": s.advertise(), "etcd": etcd, "phase": s.life.phase.Load(),
			"inflight": s.life.inflightN.Load(), "watches": s.life.activeWatches(), "pid": os.Getpid(),
		})
	})
	return mux
}

func (s *server) setPhase(p string, kv ...string) {
	s.life.phase.Store(p)
	logEvent(p, kv...)
}

func runServe(ctx context.Context, opt options) error {
	tlsCfg, pool, err := serverTLSConfig(opt.certFile, opt.keyFile, opt.clientCAFile, opt.tlsMaxVersion)
	if err != nil {
		return err
	}
	var sc storage
	switch {
	case opt.storeAddr != "" && opt.etcdServers != "":
		return errors.New("--store and --etcd-servers exclude each other")
	case opt.etcdServers != "":
		sc, err = newEtcdClient(opt.etcdServers, opt.etcdTimeout)
		opt.storeAddr = opt.etcdServers // in the messages below
	case opt.storeAddr != "":
		sc, err = newStoreClient(opt.storeAddr, opt.etcdTimeout)
	default:
		return errors.New("--store unix:PATH or --etcd-servers http://HOST:PORT is required")
	}
	if err != nil {
		return err
	}
	s := &server{opt: opt, clientCAs: pool, store: sc, life: newLifecycle()}
	if opt.name != "" {
		logName = "kprism-apiserver: " + opt.name
	}

	// The store may start at the same time: wait for it, as the apiserver waits for etcd (a real
	// etcd cluster may take longer to elect a leader).
	wait := 10 * time.Second
	if opt.etcdServers != "" {
		wait = 60 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err = s.seedNamespaces(sctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("store %s: %v", opt.storeAddr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	addr := net.JoinHostPort(opt.bindAddress, strconv.Itoa(opt.securePort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if opt.securePort == 0 {
		s.opt.securePort = ln.Addr().(*net.TCPAddr).Port
		addr = ln.Addr().String()
	}
	srv := &http.Server{Handler: s.handler(), TLSConfig: tlsCfg, ErrorLog: log.New(ioDiscard{}, "", 0)}
	if opt.logConnections {
		logConnections(srv, tlsCfg)
	}

	stop := make(chan struct{})
	var stopOnce sync.Once
	shutdown := func() { stopOnce.Do(func() { close(stop) }) }
	if opt.controlAddr != "" {
		cln, err := net.Listen("tcp", opt.controlAddr)
		if err != nil {
			return fmt.Errorf("--control-address: %v", err)
		}
		go http.Serve(cln, s.control(shutdown))
		logEvent("control-listening", "address", cln.Addr().String())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()

	recCtx, stopReconciler := context.WithCancel(context.Background())
	defer stopReconciler()
	recDone := make(chan struct{})
	go func() { defer close(recDone); s.runEndpointReconciler(recCtx) }()
	logEvent("listening", "address", addr, "pid", strconv.Itoa(os.Getpid()))

	select {
	case <-ctx.Done():
	case <-stop:
	case err := <-serveErr:
		return err
	}

	// ShutdownInitiated: /readyz fails; the pre-shutdown hook removes this apiserver from the
	// Endpoints while the shutdown delay runs.
	close(s.life.shutdownInitiated)
	s.setPhase("shutdown-initiated", "delay", opt.shutdownDelay.String())
	hooksDone := make(chan struct{})
	go func() {
		defer close(hooksDone)
		stopReconciler()
		<-recDone
		hctx, cancel := context.WithTimeout(context.Background(), opt.etcdTimeout+time.Second)
		defer cancel()
		if err := s.reconcileEndpoints(hctx, false); err != nil {
			logEvent("endpoints-remove-failed", "error", err.Error())
		} else {
			logEvent("endpoints-removed")
		}
	}()
	time.Sleep(opt.shutdownDelay)
	s.setPhase("shutdown-delay-elapsed")
	<-hooksDone

	close(s.life.notAccepting)
	shutdownDone := make(chan struct{})
	stopHTTP := func(timeout time.Duration) {
		go func() {
			defer close(shutdownDone)
			sctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			srv.Shutdown(sctx)
			srv.Close()
		}()
	}
	if opt.sendRetryAfter {
		s.setPhase("not-accepting-new-requests", "mode", "retry-after")
	} else {
		s.setPhase("not-accepting-new-requests", "mode", "listener-closed")
		stopHTTP(60 * time.Second) // ShutdownTimeout, 60 s by default (pkg/server/config.go)
	}
	s.life.inflight.Wait()
	n := s.life.endWatches()
	s.setPhase("drained", "watches-ended", strconv.Itoa(n))
	if opt.sendRetryAfter {
		stopHTTP(2 * time.Second)
		s.setPhase("listener-closed")
	}
	<-shutdownDone
	s.setPhase("exit", "code", "0")
	return nil
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

func serveFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.bindAddress, "bind-address", "127.0.0.1", "address to serve on (also the address in the Endpoints)")
	fs.IntVar(&o.securePort, "secure-port", 6443, "port to serve HTTPS on (0: any)")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM)")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "serving key (PEM)")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "CA bundle that verifies client certificates")
	maxVersion := fs.String("tls-max-version", "1.3", "highest TLS version served, 1.2 or 1.3 (test only: kube-apiserver has only --tls-min-version; this lets benches pin TLS 1.2)")
	fs.BoolVar(&o.anonymous, "anonymous-auth", false, "treat requests without a valid client certificate as system:anonymous (kube-apiserver's default is true)")
	fs.StringVar(&o.storeAddr, "store", "", "the shared store, unix:PATH")
	fs.StringVar(&o.etcdServers, "etcd-servers", "", "a real etcd instead of --store: http://HOST:PORT (its v3 JSON gateway; the first URL is used)")
	fs.DurationVar(&o.healthcheckTimeout, "etcd-healthcheck-timeout", 2*time.Second, "timeout of the etcd read of the \"etcd\" health check")
	fs.DurationVar(&o.readycheckTimeout, "etcd-readycheck-timeout", 2*time.Second, "timeout of the etcd read of the \"etcd-readiness\" check")
	fs.StringVar(&o.nodeName, "node-name", "", "with --zone: publish the EndpointSlice kubernetes-NODE with this nodeName")
	fs.StringVar(&o.zone, "zone", "", "with --node-name: the zone of this apiserver's endpoint in its EndpointSlice")
	fs.BoolVar(&o.sharedSlice, "shared-endpointslice", false, "with --node-name: write the shared EndpointSlice kubernetes too, as kube-apiserver does")
	fs.StringVar(&o.controlAddr, "control-address", "", "plain-HTTP test control endpoint, HOST:PORT (loopback)")
	fs.DurationVar(&o.etcdTimeout, "etcd-request-timeout", 5*time.Second, "how long a request waits for a lost etcd before it fails 504 (kube-apiserver: --request-timeout, 60s)")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay-duration", 0, "time to keep serving after SIGTERM, /readyz failing")
	fs.BoolVar(&o.sendRetryAfter, "shutdown-send-retry-after", false, "after the delay, answer new requests 429 Retry-After until the ones in flight drain")
	fs.Float64Var(&o.goawayChance, "goaway-chance", 0, "probability that an HTTP/2 response carries Connection: close (GOAWAY); kube-apiserver allows 0..0.02")
	fs.DurationVar(&o.leaseTTL, "endpoint-lease-ttl", 15*time.Second, "TTL of this apiserver's endpoint lease")
	fs.DurationVar(&o.reconcileInterval, "endpoint-reconcile-interval", 10*time.Second, "how often the lease is renewed and the Endpoints reconciled")
	fs.DurationVar(&o.bookmarkInterval, "watch-bookmark-interval", time.Minute, "interval of BOOKMARK events on watches that allow them")
	fs.DurationVar(&o.progressInterval, "watch-progress-interval", 200*time.Millisecond, "how often the store reports its revision to an idle watch (bookmark freshness)")
	fs.DurationVar(&o.minRequestTimeout, "min-request-timeout", 1800*time.Second, "length of a watch without timeoutSeconds")
	fs.StringVar(&o.version, "version", "v1.32.0", "gitVersion served at /version")
	fs.StringVar(&o.name, "name", "", "name in the log lines")
	fs.IntVar(&o.extraHooks, "extra-poststart-hooks", 0, "register N more post-start hooks, poststarthook/extra-1..N, in the health checks (test only: a failing /readyz past 2048 bytes, which net/http sends chunked)")
	fs.BoolVar(&o.logConnections, "log-connections", false, "log every accepted connection, TLS handshake and request with its time (test only, for benches)")
	// kube-apiserver's own spellings of the certificate flags, as the brief also names them.
	fs.StringVar(&o.certFile, "cert-file", "", "same as --tls-cert-file")
	fs.StringVar(&o.keyFile, "key-file", "", "same as --tls-private-key-file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var ok bool
	if o.tlsMaxVersion, ok = tlsVersions[*maxVersion]; !ok {
		return o, fmt.Errorf("--tls-max-version %q: must be 1.2 or 1.3", *maxVersion)
	}
	if o.certFile == "" || o.keyFile == "" {
		return o, errors.New("--tls-cert-file and --tls-private-key-file are required")
	}
	if (o.nodeName == "") != (o.zone == "") {
		return o, errors.New("--node-name and --zone go together")
	}
	if o.extraHooks < 0 || o.extraHooks > 10000 {
		return o, errors.New("--extra-poststart-hooks must be in [0, 10000]")
	}
	if o.goawayChance < 0 || o.goawayChance > 1 {
		return o, errors.New("--goaway-chance must be in [0, 1]")
	}
	return o, nil
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kprism-apiserver store --listen unix:PATH [--history N]\n       kprism-apiserver serve --store unix:PATH|--etcd-servers URL --tls-cert-file F --tls-private-key-file F [flags]  (serve -h lists them)")
}

// realMain runs the command line and returns the exit status.
func realMain(args []string) int {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetOutput(os.Stderr)
	if len(args) < 1 {
		usage()
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	var err error
	switch args[0] {
	case "store":
		fs := flag.NewFlagSet("store", flag.ContinueOnError)
		listen := fs.String("listen", "", "unix:PATH to listen on")
		hist := fs.Int("history", 10000, "events kept for watches (older resourceVersions get 410 Expired)")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		err = runStore(ctx, *listen, *hist)
	case "serve":
		opt, perr := serveFlags(args[1:])
		if perr != nil {
			if errors.Is(perr, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "kprism-apiserver:", perr)
			return 2
		}
		err = runServe(ctx, opt)
	default:
		usage()
		return 2
	}
	if err != nil {
		logEvent("exit", "code", "1", "error", err.Error())
		return 1
	}
	return 0
}

func main() {
	os.Exit(realMain(os.Args[1:]))
}
