// SPDX-License-Identifier: Apache-2.0
// Test harness: the test binary doubles as kprism-apiserver (KAS_CHILD=1 runs realMain), so every
// test drives real processes (signals, exit status, listeners) with certificates made here.
package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("KAS_CHILD") == "1" {
		var args []string
		json.Unmarshal([]byte(os.Getenv("KAS_ARGS")), &args)
		os.Exit(realMain(args))
	}
	os.Exit(m.Run())
}

// pki: a cluster CA, a serving certificate for 127.0.0.1, an admin client certificate
// (CN=admin, O=system:masters) and one from a CA the server does not trust.
type pki struct {
	dir                       string
	caFile, certFile, keyFile string
	caPool                    *x509.CertPool
	admin, untrusted          tls.Certificate
}

var (
	pkiOnce sync.Once
	thePKI  *pki
)

func writePEM(path, typ string, der []byte) {
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func newCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, subj pkix.Name, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subj,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	return der, key
}

func tlsCert(der []byte, key *ecdsa.PrivateKey) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func getPKI(t *testing.T) *pki {
	pkiOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kas-pki")
		if err != nil {
			panic(err)
		}
		p := &pki{dir: dir, caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "srv.crt"), keyFile: filepath.Join(dir, "srv.key")}
		ca, caKey := newCA("kas-test-ca")
		writePEM(p.caFile, "CERTIFICATE", ca.Raw)
		p.caPool = x509.NewCertPool()
		p.caPool.AddCert(ca)
		der, key := issue(ca, caKey, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
			[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.11"), net.ParseIP("127.0.0.12"), net.ParseIP("127.0.0.13")})
		writePEM(p.certFile, "CERTIFICATE", der)
		kb, _ := x509.MarshalECPrivateKey(key)
		writePEM(p.keyFile, "EC PRIVATE KEY", kb)
		der, key = issue(ca, caKey, pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil)
		p.admin = tlsCert(der, key)
		other, otherKey := newCA("other-ca")
		der, key = issue(other, otherKey, pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil)
		p.untrusted = tlsCert(der, key)
		thePKI = p
	})
	return thePKI
}

// proc is a child kprism-apiserver with its stderr captured line by line.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
	done  chan struct{}
	code  int
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KAS_CHILD=1", "KAS_ARGS="+string(a))
	stderr, _ := cmd.StderrPipe()
	p := &proc{t: t, cmd: cmd, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		err := cmd.Wait()
		p.mu.Lock()
		p.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		}
		close(p.done)
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("log of %v:\n%s", args[:1], strings.Join(p.log(), "\n"))
		}
	})
	return p
}

func (p *proc) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLog waits for a line matching re and returns its submatches.
func (p *proc) waitLog(re string, timeout time.Duration) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	go func() { time.Sleep(timeout); p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() }()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for _, l := range p.lines {
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		select {
		case <-p.done:
			p.t.Fatalf("process exited before a log line matching %q:\n%s", re, strings.Join(p.lines, "\n"))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no log line matching %q within %v:\n%s", re, timeout, strings.Join(p.lines, "\n"))
		}
		p.cond.Wait()
	}
}

func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("process still running after %v", timeout)
		return -1
	}
}

func startStore(t *testing.T, history int) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "store.sock")
	p := startProc(t, "store", "--listen", "unix:"+sock, "--history", fmt.Sprint(history))
	p.waitLog(`event=store-listening`, 5*time.Second)
	return sock
}

type apiserver struct {
	*proc
	addr    string // host:port of the HTTPS listener
	control string // http://host:port
}

func startServer(t *testing.T, sock string, extra ...string) *apiserver {
	t.Helper()
	k := getPKI(t)
	args := []string{"serve", "--store", "unix:" + sock, "--tls-cert-file", k.certFile, "--tls-private-key-file", k.keyFile,
		"--client-ca-file", k.caFile, "--secure-port", "0", "--control-address", "127.0.0.1:0", "--etcd-request-timeout", "1s"}
	p := startProc(t, append(args, extra...)...)
	c := p.waitLog(`event=control-listening address=(\S+)`, 5*time.Second)
	l := p.waitLog(`event=listening address=(\S+)`, 5*time.Second)
	return &apiserver{proc: p, addr: l[1], control: "http://" + c[1]}
}

// clientTLS: trusts the cluster CA, presents cert (nil: none), offers these ALPN protocols.
func clientTLS(t *testing.T, cert *tls.Certificate, protos ...string) *tls.Config {
	k := getPKI(t)
	c := &tls.Config{RootCAs: k.caPool, NextProtos: protos}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

func newClient(t *testing.T, cert *tls.Certificate, h2 bool) *http.Client {
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
	}
	tr := &http.Transport{TLSClientConfig: clientTLS(t, cert, protos...), ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func adminClient(t *testing.T) *http.Client { k := getPKI(t); return newClient(t, &k.admin, false) }

type response struct {
	code  int
	hdr   http.Header
	body  string
	close bool // Connection: close (net/http moves it from the header to Response.Close)
}

func do(t *testing.T, c *http.Client, method, url, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b), resp.Close}
}

func (s *apiserver) url(path string) string { return "https://" + s.addr + path }

func (s *apiserver) post(t *testing.T, path string) {
	t.Helper()
	resp, err := http.Post(s.control+path, "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("control %s: %v %v", path, err, resp)
	}
	resp.Body.Close()
}

func (s *apiserver) state(t *testing.T) map[string]interface{} {
	t.Helper()
	resp, err := http.Get(s.control + "/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]interface{}
	json.NewDecoder(resp.Body).Decode(&m)
	return m
}

func expect(t *testing.T, what string, got, want interface{}) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got: %q\nwant: %q", what, got, want)
	}
}

// compactJSON re-encodes a JSON text without insignificant space, keys in the order given.
func compactJSON(s string) string {
	var b bytes.Buffer
	json.Compact(&b, []byte(s))
	return b.String()
}

func createCM(t *testing.T, c *http.Client, s *apiserver, ns, name string) map[string]interface{} {
	t.Helper()
	r := do(t, c, "POST", s.url("/api/v1/namespaces/"+ns+"/configmaps"),
		fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":{"k":"v"}}`, name))
	if r.code != 201 {
		t.Fatalf("create %s/%s: %d %s", ns, name, r.code, r.body)
	}
	var m map[string]interface{}
	json.Unmarshal([]byte(r.body), &m)
	return m
}

// The test-only X-Standin-Name header names the answering stand-in, on errors too; without
// --name no such header is sent.
func TestServedByHeader(t *testing.T) {
	sock := startStore(t, 100)
	named := startServer(t, sock, "--name", "a7")
	plain := startServer(t, sock)
	c := adminClient(t)
	expect(t, "named /version", do(t, c, "GET", named.url("/version"), "").hdr.Get(servedByHeader), "a7")
	expect(t, "named 404", do(t, c, "GET", named.url("/api/v1/namespaces/default/configmaps/nope"), "").hdr.Get(servedByHeader), "a7")
	anon := newClient(t, nil, false)
	expect(t, "named 401", do(t, anon, "GET", named.url("/readyz"), "").hdr.Get(servedByHeader), "a7")
	expect(t, "unnamed /version", do(t, c, "GET", plain.url("/version"), "").hdr.Get(servedByHeader), "")
}
