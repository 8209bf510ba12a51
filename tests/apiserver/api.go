// SPDX-License-Identifier: Apache-2.0
// The API: /version, discovery (/api, /api/v1, /apis, /apis/discovery.k8s.io[/v1]), and
// configmaps, endpoints, endpointslices, leases and namespaces (list, get, create, update, delete,
// watch) served from the store.
//
// Formats: the discovery types of k8s.io/apimachinery pkg/apis/meta/v1/types.go (APIVersions,
// APIGroupList, APIGroup, APIResourceList); list and watch as pkg/endpoints/handlers/get.go and
// watch.go answer them: a list carries metadata.resourceVersion, a watch is a stream of
// {"type":...,"object":...} objects each followed by a newline (the JSON framer of
// k8s.io/apimachinery pkg/runtime/serializer/json), objects inside a list carry no kind and
// apiVersion. The watch semantics follow pkg/storage/cacher/cacher.go: resourceVersion unset or
// "0" sends the current objects as ADDED first; resourceVersion=N sends the changes after N; N
// older than the retained history gives one ERROR event holding the 410 Expired Status ("too old
// resource version: N (M)", pkg/storage/cacher/watch_cache_history.go) on a 200 stream, not a 410
// response; BOOKMARK events carry an empty object of the kind with only metadata.resourceVersion.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type resourceDef struct {
	resource, group, version, kind string
	namespaced                     bool
	shortNames                     []string
}

var resourceDefs = []resourceDef{
	{"configmaps", "", "v1", "ConfigMap", true, []string{"cm"}},
	{"endpoints", "", "v1", "Endpoints", true, []string{"ep"}},
	{"namespaces", "", "v1", "Namespace", false, []string{"ns"}},
	{"nodes", "", "v1", "Node", false, []string{"no"}},
	{"pods", "", "v1", "Pod", true, []string{"po"}},
	{"endpointslices", "discovery.k8s.io", "v1", "EndpointSlice", true, nil},
	{"leases", "coordination.k8s.io", "v1", "Lease", true, nil},
}

var verbs = []string{"create", "delete", "get", "list", "update", "watch"}

// apiGroups: the named groups of resourceDefs, in order.
func apiGroups() []string {
	seen := map[string]bool{}
	gs := []string{}
	for _, d := range resourceDefs {
		if d.group != "" && !seen[d.group] {
			seen[d.group] = true
			gs = append(gs, d.group)
		}
	}
	return gs
}

func (d resourceDef) apiVersion() string {
	if d.group == "" {
		return d.version
	}
	return d.group + "/" + d.version
}

type resourceReq struct {
	group, version, resource, namespace, name string
	def                                       *resourceDef
}

// parseResourcePath: /api/v1/RES[/NAME], /api/v1/namespaces/NS/RES[/NAME],
// /apis/G/V/RES[/NAME], /apis/G/V/namespaces/NS/RES[/NAME].
func parseResourcePath(path string) (resourceReq, bool) {
	var rr resourceReq
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api" && parts[1] == "v1":
		rr.version, parts = "v1", parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rr.group, rr.version, parts = parts[1], parts[2], parts[3:]
	default:
		return rr, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		rr.namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 1:
		rr.resource = parts[0]
	case 2:
		rr.resource, rr.name = parts[0], parts[1]
	default:
		return rr, false
	}
	for i := range resourceDefs {
		d := &resourceDefs[i]
		if d.resource == rr.resource && d.group == rr.group && d.version == rr.version {
			rr.def = d
		}
	}
	return rr, true
}

// isWatch decodes ?watch= as apimachinery's query conversion does (Convert_Slice_string_To_bool
// in k8s.io/apimachinery/pkg/runtime/conversion.go): present and not "false" or "0", in any case,
// is true. The python client sends "True".
func isWatch(r *http.Request) bool {
	q := r.URL.Query()
	if _, ok := q["watch"]; !ok {
		return false
	}
	v := strings.ToLower(q.Get("watch"))
	return v != "false" && v != "0"
}

// storeKey: RESOURCE/NAMESPACE/NAME ("" namespace for cluster-scoped kinds).
func storeKey(resource, namespace, name string) string {
	return resource + "/" + namespace + "/" + name
}

func storePrefix(rr resourceReq) string {
	if rr.namespace == "" {
		return rr.resource + "/"
	}
	return rr.resource + "/" + rr.namespace + "/"
}

func (s *server) installAPI(mux *http.ServeMux) {
	mux.HandleFunc("/version", s.serveVersion)
	mux.HandleFunc("/version/", s.serveVersion)
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]interface{}{
			"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": s.advertise()}},
		})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, r *http.Request) {
		groups := []interface{}{}
		for _, g := range apiGroups() {
			groups = append(groups, discoveryGroup(g))
		}
		writeJSON(w, 200, map[string]interface{}{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
	})
	for _, g := range apiGroups() {
		g := g
		mux.HandleFunc("/apis/"+g, func(w http.ResponseWriter, r *http.Request) {
			dg := discoveryGroup(g)
			dg["kind"], dg["apiVersion"] = "APIGroup", "v1"
			writeJSON(w, 200, dg)
		})
	}
	mux.HandleFunc("/", s.serveResource)
}

func discoveryGroup(group string) map[string]interface{} {
	gv := map[string]string{"groupVersion": group + "/v1", "version": "v1"}
	return map[string]interface{}{"name": group, "versions": []interface{}{gv}, "preferredVersion": gv}
}

// resourceList is the APIResourceList of GROUP/VERSION.
func resourceList(group, version string) map[string]interface{} {
	res := []interface{}{}
	for _, d := range resourceDefs {
		if d.group != group || d.version != version {
			continue
		}
		m := map[string]interface{}{
			"name": d.resource, "singularName": strings.ToLower(d.kind), "namespaced": d.namespaced,
			"kind": d.kind, "verbs": verbs,
		}
		if d.shortNames != nil {
			m["shortNames"] = d.shortNames
		}
		res = append(res, m)
	}
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	return map[string]interface{}{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}
}

// serveVersion: version.Info (k8s.io/apimachinery pkg/version/types.go).
func (s *server) serveVersion(w http.ResponseWriter, r *http.Request) {
	v := strings.TrimPrefix(s.opt.version, "v")
	p := strings.SplitN(v, ".", 3)
	for len(p) < 2 {
		p = append(p, "0")
	}
	writeJSON(w, 200, map[string]string{
		"major": p[0], "minor": p[1], "gitVersion": s.opt.version, "gitCommit": "0000000000000000000000000000000000000000",
		"gitTreeState": "clean", "buildDate": "2024-01-01T00:00:00Z", "goVersion": goVersion(), "compiler": "gc",
		"platform": "linux/amd64",
	})
}

func (s *server) serveResource(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/v1", "/api/v1/":
		writeJSON(w, 200, resourceList("", "v1"))
		return
	}
	for _, g := range apiGroups() {
		if p := "/apis/" + g + "/v1"; r.URL.Path == p || r.URL.Path == p+"/" {
			writeJSON(w, 200, resourceList(g, "v1"))
			return
		}
	}
	rr, ok := parseResourcePath(r.URL.Path)
	if !ok || rr.def == nil || (rr.namespace != "" && !rr.def.namespaced) {
		writeStatus(w, statusPathNotFound())
		return
	}
	switch {
	case r.Method == "GET" && isWatch(r):
		s.serveWatch(w, r, rr)
	case r.Method == "GET" && rr.name == "":
		s.serveList(w, r, rr)
	case r.Method == "GET":
		s.serveGet(w, r, rr)
	case r.Method == "POST" && rr.name == "":
		s.serveCreate(w, r, rr)
	case r.Method == "PUT" && rr.name != "":
		s.serveUpdate(w, r, rr)
	case r.Method == "DELETE" && rr.name != "":
		s.serveDelete(w, r, rr)
	default:
		writeStatus(w, statusMethodNotSupported(rr.resource, rr.group, strings.ToLower(r.Method)))
	}
}

// storeErrorStatus: the store did not answer in time -> 504 Timeout (the request's deadline,
// finisher.go); an error etcd answered -> 500 with etcd's text and no reason (a raw etcd error
// passes storage/errors/storage.go's Interpret*Error unchanged and becomes
// responsewriters/status.go's convertStorageErrorOrNot Status); anything else -> 500 InternalError.
func storeErrorStatus(err error) *status {
	if errors.Is(err, errStoreTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return statusTimeout()
	}
	var ee *etcdError
	if errors.As(err, &ee) {
		return newStatus(500, "", ee.Msg, nil)
	}
	return statusInternal(err)
}

// decode turns a stored object into the one served: resourceVersion = the revision of its write.
func decodeStored(kv storeKV, d *resourceDef) (object, error) {
	var o object
	if err := json.Unmarshal(kv.Obj, &o); err != nil {
		return o, err
	}
	o.Kind, o.APIVersion = d.kind, d.apiVersion()
	o.Metadata.ResourceVersion = strconv.FormatInt(kv.Rev, 10)
	return o, nil
}

// namedOp runs op ("get", "delete") on the object rr names. On a store error or a missing object
// it answers the Status itself and returns false.
func (s *server) namedOp(w http.ResponseWriter, r *http.Request, rr resourceReq, op string) (*storeKV, bool) {
	reply, err := s.store.do(r.Context(), storeOp{Op: op, Key: storeKey(rr.resource, rr.namespace, rr.name)})
	if err != nil {
		writeStatus(w, storeErrorStatus(err))
		return nil, false
	}
	if reply.Err == "notfound" {
		writeStatus(w, statusNotFound(rr.resource, rr.group, rr.name))
		return nil, false
	}
	return reply.KV, true
}

func (s *server) serveGet(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	kv, ok := s.namedOp(w, r, rr, "get")
	if !ok {
		return
	}
	o, err := decodeStored(*kv, rr.def)
	if err != nil {
		writeStatus(w, statusInternal(err))
		return
	}
	writeJSON(w, 200, o)
}

// selector: the equality forms of labelSelector (k=v, k==v, k!=v, k) and fieldSelector
// (metadata.name, metadata.namespace; spec.nodeName on pods), comma-joined.
type selector struct{ labels, fields []string }

// parseSelector: a field the resource has no selector for is a 400, as the apiserver answers
// ("field label not supported: F", k8s.io/apimachinery pkg/runtime/conversion.go).
func parseSelector(r *http.Request, rr resourceReq) (selector, *status) {
	q := r.URL.Query()
	var s selector
	if v := q.Get("labelSelector"); v != "" {
		s.labels = strings.Split(v, ",")
	}
	if v := q.Get("fieldSelector"); v != "" {
		s.fields = strings.Split(v, ",")
		for _, t := range s.fields {
			k := strings.TrimRight(strings.SplitN(t, "=", 2)[0], "!")
			if k != "metadata.name" && k != "metadata.namespace" && !(k == "spec.nodeName" && rr.resource == "pods") {
				return s, statusBadRequest("field label not supported: " + k)
			}
		}
	}
	return s, nil
}

func matchTerm(term string, get func(string) (string, bool)) bool {
	if i := strings.Index(term, "!="); i >= 0 {
		v, _ := get(term[:i])
		return v != term[i+2:]
	}
	if i := strings.Index(term, "="); i >= 0 {
		k, want := term[:i], strings.TrimPrefix(term[i+1:], "=")
		v, ok := get(k)
		return ok && v == want
	}
	_, ok := get(term)
	return ok
}

func (sel selector) matches(o *object) bool {
	for _, t := range sel.labels {
		if !matchTerm(t, func(k string) (string, bool) { v, ok := o.Metadata.Labels[k]; return v, ok }) {
			return false
		}
	}
	for _, t := range sel.fields {
		if !matchTerm(t, func(k string) (string, bool) {
			switch k {
			case "metadata.name":
				return o.Metadata.Name, true
			case "metadata.namespace":
				return o.Metadata.Namespace, true
			case "spec.nodeName": // pods only (parseSelector): the kubelet's pod watch (pkg/kubelet/config/apiserver.go)
				var spec struct {
					NodeName string `json:"nodeName"`
				}
				json.Unmarshal(o.Rest["spec"], &spec)
				return spec.NodeName, true
			}
			return "", false
		}) {
			return false
		}
	}
	return true
}

func (s *server) serveList(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	reply, err := s.store.do(r.Context(), storeOp{Op: "list", Prefix: storePrefix(rr)})
	if err != nil {
		writeStatus(w, storeErrorStatus(err))
		return
	}
	sel, bad := parseSelector(r, rr)
	if bad != nil {
		writeStatus(w, bad)
		return
	}
	items := []object{}
	for _, kv := range reply.Items {
		o, err := decodeStored(kv, rr.def)
		if err != nil || !sel.matches(&o) {
			continue
		}
		o.Kind, o.APIVersion = "", ""
		items = append(items, o)
	}
	writeJSON(w, 200, map[string]interface{}{
		"kind": rr.def.kind + "List", "apiVersion": rr.def.apiVersion(),
		"metadata": map[string]string{"resourceVersion": strconv.FormatInt(reply.Rev, 10)},
		"items":    items,
	})
}

func newUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func nowTimestamp() *string {
	t := time.Now().UTC().Format(time.RFC3339)
	return &t
}

// prepareNew fills what the apiserver sets on create: namespace, uid, creationTimestamp, a name
// from generateName; resourceVersion is the store's.
func prepareNew(o *object, d *resourceDef, namespace string) {
	o.Kind, o.APIVersion = d.kind, d.apiVersion()
	o.Metadata.Namespace = namespace
	if o.Metadata.Name == "" && o.Metadata.GenerateName != "" {
		b := make([]byte, 3)
		rand.Read(b)
		o.Metadata.Name = o.Metadata.GenerateName + hex.EncodeToString(b)[:5]
	}
	o.Metadata.UID = newUID()
	o.Metadata.ResourceVersion = ""
	o.Metadata.CreationTimestamp = nowTimestamp()
}

func (s *server) serveCreate(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	o, ok := readBody(w, r, rr.def)
	if !ok {
		return
	}
	if o.Metadata.Namespace != "" && rr.namespace != "" && o.Metadata.Namespace != rr.namespace {
		// pkg/endpoints/handlers/rest.go: the namespace of the object and of the path must match.
		writeStatus(w, statusBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	prepareNew(&o, rr.def, rr.namespace)
	if o.Metadata.Name == "" {
		st := newStatus(422, "Invalid", fmt.Sprintf("%s %q is invalid: metadata.name: Required value: name or generateName is required", rr.def.kind, ""),
			&statusDetails{Group: rr.group, Kind: rr.def.kind})
		writeStatus(w, st)
		return
	}
	code, out, st := s.createObject(r.Context(), rr.def, o)
	if st != nil {
		writeStatus(w, st)
		return
	}
	writeJSON(w, code, out)
}

func (s *server) createObject(ctx context.Context, d *resourceDef, o object) (int, object, *status) {
	enc, _ := json.Marshal(o)
	reply, err := s.store.do(ctx, storeOp{Op: "create", Key: storeKey(d.resource, o.Metadata.Namespace, o.Metadata.Name), Obj: enc})
	if err != nil {
		return 0, o, storeErrorStatus(err)
	}
	if reply.Err == "exists" {
		return 0, o, statusAlreadyExists(d.resource, d.group, o.Metadata.Name)
	}
	o.Metadata.ResourceVersion = strconv.FormatInt(reply.KV.Rev, 10)
	return http.StatusCreated, o, nil
}

// readBody decodes a request's object (JSON, or protobuf for the kinds proto.go knows); on a
// failure it answers the Status itself and returns false.
func readBody(w http.ResponseWriter, r *http.Request, d *resourceDef) (object, bool) {
	var o object
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		writeStatus(w, statusBadRequest(err.Error()))
		return o, false
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
		if o, err = decodeProtobuf(body, d); err != nil {
			writeStatus(w, newStatus(415, "UnsupportedMediaType", err.Error(), nil))
			return o, false
		}
	} else if err := json.Unmarshal(body, &o); err != nil {
		writeStatus(w, statusBadRequest(fmt.Sprintf("the object provided is unrecognized: %v", err)))
		return o, false
	}
	if o.Kind != "" && o.Kind != d.kind {
		writeStatus(w, statusBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", o.APIVersion, d.apiVersion())))
		return o, false
	}
	return o, true
}

// serveUpdate is PUT: the registry's Update (pkg/registry/generic/registry/store.go) over
// GuaranteedUpdate: a resourceVersion in the body must be the object's current one, else 409
// Conflict with OptimisticLockErrorMsg (storage/errors/storage.go InterpretUpdateError ->
// NewConflict); without one the update is unconditional (retried on a concurrent write); a
// missing object is 404 (these kinds do not allow create on update); uid and creationTimestamp
// are kept.
func (s *server) serveUpdate(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	o, ok := readBody(w, r, rr.def)
	if !ok {
		return
	}
	if o.Metadata.Name != rr.name {
		writeStatus(w, statusBadRequest("the name of the object ("+o.Metadata.Name+") does not match the name on the URL ("+rr.name+")"))
		return
	}
	if o.Metadata.Namespace != "" && o.Metadata.Namespace != rr.namespace {
		writeStatus(w, statusBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	var want int64
	if o.Metadata.ResourceVersion != "" {
		n, err := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
		if err != nil || n <= 0 {
			writeStatus(w, statusBadRequest("invalid resourceVersion: "+o.Metadata.ResourceVersion))
			return
		}
		want = n
	}
	key := storeKey(rr.resource, rr.namespace, rr.name)
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := s.store.do(r.Context(), storeOp{Op: "get", Key: key})
		if err != nil {
			writeStatus(w, storeErrorStatus(err))
			return
		}
		if cur.Err == "notfound" {
			writeStatus(w, statusNotFound(rr.resource, rr.group, rr.name))
			return
		}
		old, err := decodeStored(*cur.KV, rr.def)
		if err != nil {
			writeStatus(w, statusInternal(err))
			return
		}
		pre := want
		if pre == 0 {
			pre = cur.KV.Rev
		}
		n := o
		n.Kind, n.APIVersion = rr.def.kind, rr.def.apiVersion()
		n.Metadata.Namespace = rr.namespace
		n.Metadata.UID, n.Metadata.CreationTimestamp = old.Metadata.UID, old.Metadata.CreationTimestamp
		n.Metadata.ResourceVersion = ""
		enc, _ := json.Marshal(n)
		reply, err := s.store.do(r.Context(), storeOp{Op: "update", Key: key, Obj: enc, Rev: pre})
		if err != nil {
			writeStatus(w, storeErrorStatus(err))
			return
		}
		switch reply.Err {
		case "notfound":
			writeStatus(w, statusNotFound(rr.resource, rr.group, rr.name))
			return
		case "conflict":
			if want != 0 {
				writeStatus(w, statusConflict(rr.resource, rr.group, rr.name))
				return
			}
			continue
		}
		n.Metadata.ResourceVersion = strconv.FormatInt(reply.KV.Rev, 10)
		writeJSON(w, 200, n)
		return
	}
	writeStatus(w, statusConflict(rr.resource, rr.group, rr.name))
}

func (s *server) serveDelete(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	kv, ok := s.namedOp(w, r, rr, "delete")
	if !ok {
		return
	}
	o, _ := decodeStored(*kv, rr.def)
	// Kinds without graceful deletion answer a Success Status (pkg/endpoints/handlers/delete.go).
	writeJSON(w, 200, map[string]interface{}{
		"kind": "Status", "apiVersion": "v1", "metadata": struct{}{}, "status": "Success",
		"details": map[string]string{"name": rr.name, "group": rr.group, "kind": rr.resource, "uid": o.Metadata.UID},
	})
}

type watchEvent struct {
	Type   string      `json:"type"`
	Object interface{} `json:"object"`
}

func bookmarkObject(d *resourceDef, rv int64) object {
	return object{Kind: d.kind, APIVersion: d.apiVersion(), Metadata: objectMeta{ResourceVersion: strconv.FormatInt(rv, 10)}}
}

func (s *server) serveWatch(w http.ResponseWriter, r *http.Request, rr resourceReq) {
	q := r.URL.Query()
	sel, bad := parseSelector(r, rr)
	if bad != nil {
		writeStatus(w, bad)
		return
	}
	if rr.name != "" {
		sel.fields = append(sel.fields, "metadata.name="+rr.name)
		rr.name = ""
	}
	prefix := storePrefix(rr)
	timeout := s.opt.minRequestTimeout
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeStatus(w, statusBadRequest("invalid timeoutSeconds"))
			return
		}
		timeout = time.Duration(n) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if !s.life.addWatch(cancel) {
		writeStatus(w, newStatus(503, "ServiceUnavailable", "apiserver is shutting down", nil))
		return
	}
	defer s.life.doneWatch()

	var from int64
	var initial []storeKV
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" {
		reply, err := s.store.do(ctx, storeOp{Op: "list", Prefix: prefix})
		if err != nil {
			writeStatus(w, storeErrorStatus(err))
			return
		}
		from, initial = reply.Rev, reply.Items
	} else {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, statusBadRequest(fmt.Sprintf("invalid resource version: %s", rv)))
			return
		}
		if _, err := s.store.do(ctx, storeOp{Op: "rev"}); err != nil {
			writeStatus(w, storeErrorStatus(err))
			return
		}
		from = n
	}
	events := make(chan storeEvent, 64)
	go func() {
		if err := s.store.watch(ctx, prefix, from, s.opt.progressInterval, events); err != nil && ctx.Err() == nil {
			logEvent("store-watch-ended", "prefix", prefix, "error", err.Error())
		}
	}()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(ev watchEvent) bool {
		if enc.Encode(ev) != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	if fl != nil {
		fl.Flush()
	}
	for _, kv := range initial {
		o, err := decodeStored(kv, rr.def)
		if err == nil && sel.matches(&o) && !send(watchEvent{"ADDED", o}) {
			return
		}
	}
	var bookmarks <-chan time.Time
	if q.Get("allowWatchBookmarks") == "true" {
		t := time.NewTicker(s.opt.bookmarkInterval)
		defer t.Stop()
		bookmarks = t.C
	}
	last := from
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return // etcd lost, the store gone, the timeout or the client: the stream ends
			}
			switch ev.Type {
			case "EXPIRED":
				send(watchEvent{"ERROR", statusExpired(fmt.Sprintf("too old resource version: %d (%d)", from, ev.Rev))})
				return
			case "PROGRESS":
				last = ev.Rev
				continue
			}
			last = ev.Rev
			o, err := decodeStored(storeKV{Key: ev.Key, Rev: ev.Rev, Obj: ev.Obj}, rr.def)
			if err != nil || !sel.matches(&o) {
				continue
			}
			if !send(watchEvent{ev.Type, o}) {
				return
			}
		case <-bookmarks:
			if !send(watchEvent{"BOOKMARK", bookmarkObject(rr.def, last)}) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
