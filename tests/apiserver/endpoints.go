// SPDX-License-Identifier: Apache-2.0
// The default/kubernetes Endpoints and EndpointSlice, kept as kube-apiserver's lease endpoint
// reconciler keeps them (pkg/controlplane/reconcilers/lease.go in kubernetes/kubernetes, not
// mirrored here; --endpoint-reconciler-type=lease, the default): every apiserver holds a key with a
// TTL in the store (/masterleases/IP there, 15 s), renews it and rewrites the Endpoints from the
// unexpired keys every reconcile interval (10 s there); at the start of a graceful shutdown it
// deletes its own key and rewrites the Endpoints (the pre-shutdown hook that
// pkg/server/genericapiserver.go runs at ShutdownInitiated); a crashed one stays listed until its
// key expires and the next reconcile of a surviving apiserver drops it.
//
// Shapes: Endpoints with one subset per port, addresses sorted, port "https"/TCP, label
// endpointslice.kubernetes.io/skip-mirror=true; the EndpointSlice is the one
// pkg/controlplane/reconcilers/endpointsadapter.go derives from the Endpoints
// (endpointSliceFromEndpoints): same name, label kubernetes.io/service-name=kubernetes only, made
// from the first subset, addressType IPv4 (IPv6 if every address is), conditions.ready=true.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strings"
	"time"
)

type masterLease struct {
	IP   string `json:"ip"`
	Port int    `json:"port"`
}

const leasePrefix = "masterleases/"

func (s *server) leaseKey() string {
	return leasePrefix + net.JoinHostPort(s.opt.bindAddress, fmt.Sprint(s.opt.securePort))
}

type epAddress struct {
	IP string `json:"ip"`
}
type epPort struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
}
type epSubset struct {
	Addresses []epAddress `json:"addresses"`
	Ports     []epPort    `json:"ports"`
}

type sliceEndpoint struct {
	Addresses  []string        `json:"addresses"`
	Conditions map[string]bool `json:"conditions"`
}
type slicePort struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}

// desiredEndpoints: the subsets for these leases, one per port, ports ascending.
func desiredEndpoints(leases []masterLease) []epSubset {
	byPort := map[int][]string{}
	for _, l := range leases {
		byPort[l.Port] = append(byPort[l.Port], l.IP)
	}
	ports := []int{}
	for p := range byPort {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	subsets := []epSubset{}
	for _, p := range ports {
		ips := byPort[p]
		sort.Strings(ips)
		ss := epSubset{Ports: []epPort{{Name: "https", Port: p, Protocol: "TCP"}}}
		for _, ip := range ips {
			ss.Addresses = append(ss.Addresses, epAddress{IP: ip})
		}
		subsets = append(subsets, ss)
	}
	return subsets
}

// reconcileEndpoints renews this apiserver's lease (unless removing it) and rewrites the
// Endpoints and the EndpointSlice when they differ from the unexpired leases.
func (s *server) reconcileEndpoints(ctx context.Context, self bool) error {
	if self {
		b, _ := json.Marshal(masterLease{IP: s.opt.bindAddress, Port: s.opt.securePort})
		if _, err := s.store.do(ctx, storeOp{Op: "put", Key: s.leaseKey(), Obj: b, TTLms: s.opt.leaseTTL.Milliseconds()}); err != nil {
			return err
		}
	} else {
		if _, err := s.store.do(ctx, storeOp{Op: "delete", Key: s.leaseKey()}); err != nil {
			return err
		}
	}
	reply, err := s.store.do(ctx, storeOp{Op: "list", Prefix: leasePrefix})
	if err != nil {
		return err
	}
	leases := []masterLease{}
	for _, kv := range reply.Items {
		var l masterLease
		if json.Unmarshal(kv.Obj, &l) == nil {
			leases = append(leases, l)
		}
	}
	subsets := desiredEndpoints(leases)
	sb, _ := json.Marshal(subsets)
	if err := s.ensure(ctx, "endpoints", "Endpoints", "v1",
		map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"},
		map[string]json.RawMessage{"subsets": sb}); err != nil {
		return err
	}
	addressType := "IPv4"
	endpoints := []sliceEndpoint{}
	ports := []slicePort{}
	if len(subsets) > 0 {
		allV6 := true
		for _, a := range subsets[0].Addresses {
			endpoints = append(endpoints, sliceEndpoint{Addresses: []string{a.IP}, Conditions: map[string]bool{"ready": true}})
			allV6 = allV6 && strings.Contains(a.IP, ":")
		}
		if allV6 {
			addressType = "IPv6"
		}
		for _, p := range subsets[0].Ports {
			ports = append(ports, slicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
		}
	}
	if s.opt.nodeName != "" {
		// One slice per apiserver instead of the shared one (below), or beside it.
		if err := s.reconcileNodeSlice(ctx, self); err != nil || !s.opt.sharedSlice {
			return err
		}
	}
	at, _ := json.Marshal(addressType)
	eb, _ := json.Marshal(endpoints)
	pb, _ := json.Marshal(ports)
	return s.ensure(ctx, "endpointslices", "EndpointSlice", "discovery.k8s.io/v1",
		map[string]string{"kubernetes.io/service-name": "kubernetes"},
		map[string]json.RawMessage{"addressType": at, "endpoints": eb, "ports": pb})
}

// ensure writes default/kubernetes of this resource when its labels or fields differ, keeping
// its uid and creationTimestamp.
func (s *server) ensure(ctx context.Context, resource, kind, apiVersion string, labels map[string]string, rest map[string]json.RawMessage) error {
	key := storeKey(resource, "default", "kubernetes")
	cur, err := s.store.do(ctx, storeOp{Op: "get", Key: key})
	if err != nil {
		return err
	}
	o := object{Kind: kind, APIVersion: apiVersion, Metadata: objectMeta{Name: "kubernetes", Namespace: "default", Labels: labels}, Rest: rest}
	if cur.Err == "" && cur.KV != nil {
		var old object
		if json.Unmarshal(cur.KV.Obj, &old) == nil {
			if reflect.DeepEqual(old.Metadata.Labels, labels) && sameRaw(old.Rest, rest) {
				return nil
			}
			o.Metadata.UID, o.Metadata.CreationTimestamp = old.Metadata.UID, old.Metadata.CreationTimestamp
		}
	}
	if o.Metadata.UID == "" {
		o.Metadata.UID, o.Metadata.CreationTimestamp = newUID(), nowTimestamp()
	}
	b, _ := json.Marshal(o)
	_, err = s.store.do(ctx, storeOp{Op: "put", Key: key, Obj: b})
	return err
}

// nodeSlice is the EndpointSlice kubernetes-NODE that --node-name and --zone publish: this
// apiserver alone, with its zone and nodeName (discovery.k8s.io/v1 Endpoint fields), label
// kubernetes.io/service-name=kubernetes so that a client listing the service's slices finds it.
func (s *server) nodeSlice() object {
	addressType := "IPv4"
	if strings.Contains(s.opt.bindAddress, ":") {
		addressType = "IPv6"
	}
	ep := map[string]interface{}{"addresses": []string{s.opt.bindAddress}, "conditions": map[string]bool{"ready": true},
		"nodeName": s.opt.nodeName, "zone": s.opt.zone}
	at, _ := json.Marshal(addressType)
	eb, _ := json.Marshal([]interface{}{ep})
	pb, _ := json.Marshal([]slicePort{{Name: "https", Protocol: "TCP", Port: s.opt.securePort}})
	return object{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1",
		Metadata: objectMeta{Name: "kubernetes-" + s.opt.nodeName, Namespace: "default",
			Labels: map[string]string{"kubernetes.io/service-name": "kubernetes"}},
		Rest: map[string]json.RawMessage{"addressType": at, "endpoints": eb, "ports": pb}}
}

// reconcileNodeSlice keeps kubernetes-NODE alive on a lease of --endpoint-lease-ttl: written
// with a fresh lease when missing or different, else only the lease is kept alive (no new
// revision, so watchers see no MODIFIED every interval); deleted when self is false (shutdown).
// A crashed apiserver's slice goes when its lease expires.
func (s *server) reconcileNodeSlice(ctx context.Context, self bool) error {
	want := s.nodeSlice()
	key := storeKey("endpointslices", "default", want.Metadata.Name)
	if !self {
		_, err := s.store.do(ctx, storeOp{Op: "delete", Key: key})
		return err
	}
	ttl := s.opt.leaseTTL.Milliseconds()
	cur, err := s.store.do(ctx, storeOp{Op: "get", Key: key})
	if err != nil {
		return err
	}
	if cur.Err == "" && cur.KV != nil {
		var old object
		if json.Unmarshal(cur.KV.Obj, &old) == nil && reflect.DeepEqual(old.Metadata.Labels, want.Metadata.Labels) && sameRaw(old.Rest, want.Rest) {
			ka, err := s.store.do(ctx, storeOp{Op: "keepalive", Key: key, TTLms: ttl})
			if err != nil {
				return err
			}
			if ka.Err == "" {
				return nil
			}
		}
		if old.Metadata.UID != "" {
			want.Metadata.UID, want.Metadata.CreationTimestamp = old.Metadata.UID, old.Metadata.CreationTimestamp
		}
	}
	if want.Metadata.UID == "" {
		want.Metadata.UID, want.Metadata.CreationTimestamp = newUID(), nowTimestamp()
	}
	b, _ := json.Marshal(want)
	_, err = s.store.do(ctx, storeOp{Op: "put", Key: key, Obj: b, TTLms: ttl})
	return err
}

func sameRaw(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		var x, y interface{}
		json.Unmarshal(v, &x)
		json.Unmarshal(b[k], &y)
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// runEndpointReconciler reconciles at once, then every interval, until ctx ends.
func (s *server) runEndpointReconciler(ctx context.Context) {
	t := time.NewTicker(s.opt.reconcileInterval)
	defer t.Stop()
	for {
		if err := s.reconcileEndpoints(ctx, true); err != nil && ctx.Err() == nil {
			logEvent("endpoints-reconcile-failed", "error", err.Error())
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// seedNamespaces creates the namespaces every cluster has, once (any apiserver may do it first).
func (s *server) seedNamespaces(ctx context.Context) error {
	d := &resourceDefs[2]
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		o := object{Metadata: objectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}},
			Rest: map[string]json.RawMessage{"spec": json.RawMessage(`{"finalizers":["kubernetes"]}`)}}
		prepareNew(&o, d, "")
		_, _, st := s.createObject(ctx, d, o)
		if st != nil && st.Reason != "AlreadyExists" {
			return fmt.Errorf("namespace %s: %s", ns, st.Message)
		}
	}
	return nil
}
