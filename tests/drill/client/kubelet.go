// SPDX-License-Identifier: Apache-2.0
// The kubelet's traffic to the apiserver, on its one HTTP/2 connection: registration, the node
// lease controller, the node status loop, the watches of its pods and its Node, and the drill's
// watch of every node's Lease.

package main

import (
	"encoding/json"
	"net/url"
	"time"
)

const (
	leaseNS           = "kube-node-lease"
	leaseDuration     = 40               // NodeLeaseDurationSeconds
	renewInterval     = 10 * time.Second // lease controller: 0.25 x the lease duration
	maxUpdateRetries  = 5                // lease controller and nodeStatusUpdateRetry
	maxEnsureBackoff  = 7 * time.Second  // lease controller maxBackoff
	statusFrequency   = 10 * time.Second // NodeStatusUpdateFrequency
	statusReportEvery = 5 * time.Minute  // NodeStatusReportFrequency
)

type kubelet struct {
	c          *client
	node       string // the Node and its Lease: NODE--BALANCER
	registered chan struct{}
	latest     map[string]interface{} // the lease controller's latestLease; only leaseLoop uses it
	nodeCache  *reflector             // the Node reflector: the status loop's first try reads its object
	leaseWatch bool                   // run the drill's watch of every node's Lease
}

// loops: the lease controller, the status loop, and the reflectors of the kubelet's pods and its
// Node; the reflector of every node's Lease is the drill's instrument (kubelet has none): each
// renewal of every node is an event on it, so its gaps show when this connection saw nothing.
func (k *kubelet) loops() []func() {
	k.nodeCache = newReflector(k.c, "node", "/api/v1/nodes", url.Values{"fieldSelector": {"metadata.name=" + k.node}}, false)
	k.nodeCache.keepLast = true
	loops := []func(){k.leaseLoop, k.statusLoop,
		newReflector(k.c, "pods", "/api/v1/pods", url.Values{"fieldSelector": {"spec.nodeName=" + k.node}}, false).run,
		k.nodeCache.run,
	}
	if k.leaseWatch {
		loops = append(loops, newReflector(k.c, "leases", "/apis/coordination.k8s.io/v1/namespaces/"+leaseNS+"/leases", nil, true).run)
	}
	return loops
}

func microtime() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

func (k *kubelet) leasePath() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + leaseNS + "/leases/" + k.node
}

// onRepeatedHeartbeatFailure: closeAllConns (cmd/kubelet/app/server.go), logged as "close-all".
func (k *kubelet) closeAll() {
	n := k.c.dialer.CloseAll()
	k.c.log.write("close-all", map[string]interface{}{"conns": n})
}

// leaseLoop is component-helpers/apimachinery/lease/controller.go: sync every renewInterval with
// wait.JitterUntil(0.04, sliding: the period counts from the end of a sync).
func (k *kubelet) leaseLoop() {
	for {
		k.leaseSync()
		if !sleep(k.c.ctx, jitter(renewInterval, 0.04)) {
			return
		}
	}
}

// leaseSync: the latest lease updated (retryUpdateLease); failing that, backoffEnsureLease, then
// an update of what it got unless it just created it.
func (k *kubelet) leaseSync() {
	if k.latest != nil && k.retryUpdate(k.latest) {
		return
	}
	lease, created := k.backoffEnsure()
	k.latest = lease
	if lease != nil && !created {
		k.retryUpdate(lease)
	}
}

// retryUpdate: up to 5 PUTs of renewTime; a conflict reads the Lease again; from the second
// failure on, every connection is closed.
func (k *kubelet) retryUpdate(base map[string]interface{}) bool {
	for i := 0; i < maxUpdateRetries; i++ {
		if k.c.ctx.Err() != nil {
			return false
		}
		lease := copyObject(base)
		spec, _ := lease["spec"].(map[string]interface{})
		if spec == nil {
			spec = map[string]interface{}{}
		}
		spec["renewTime"] = microtime()
		lease["spec"] = spec
		r := k.c.do("heartbeat", "PUT", k.leasePath(), lease, requestTimeout)
		if r.err == nil && r.code == 200 {
			var got map[string]interface{}
			if json.Unmarshal(r.body, &got) == nil {
				k.latest = got
			}
			return true
		}
		if r.code == 409 {
			base, _ = k.backoffEnsure()
			if base == nil {
				return false
			}
			continue
		}
		if i > 0 {
			k.closeAll()
		}
	}
	return false
}

// backoffEnsure: GET the Lease (create it when missing) until it works, the wait doubling from
// 200 ms to 7 s. Returns the lease and whether this call created it.
func (k *kubelet) backoffEnsure() (map[string]interface{}, bool) {
	wait := 100 * time.Millisecond
	for k.c.ctx.Err() == nil {
		r := k.c.do("heartbeat-get", "GET", k.leasePath(), nil, requestTimeout)
		created := false
		if r.err == nil && r.code == 404 {
			r = k.c.do("heartbeat-create", "POST", "/apis/coordination.k8s.io/v1/namespaces/"+leaseNS+"/leases",
				map[string]interface{}{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
					"metadata": map[string]interface{}{"name": k.node, "namespace": leaseNS},
					"spec": map[string]interface{}{"holderIdentity": k.node, "leaseDurationSeconds": leaseDuration,
						"renewTime": microtime()}}, requestTimeout)
			created = true
		}
		if r.err == nil && (r.code == 200 || r.code == 201) {
			var got map[string]interface{}
			if json.Unmarshal(r.body, &got) == nil {
				return got, created
			}
		}
		wait *= 2
		if wait > maxEnsureBackoff {
			wait = maxEnsureBackoff
		}
		if !sleep(k.c.ctx, wait) {
			break
		}
	}
	return nil, false
}

// statusLoop: registration (pkg/kubelet/kubelet_node_status.go registerWithAPIServer: POST the
// Node, retried with a backoff of 100 ms doubling to 7 s), then syncNodeStatus every
// NodeStatusUpdateFrequency with 4 % jitter: updateNodeStatus, up to 5 tries of
// tryUpdateNodeStatus. Its first try reads the Node from the informer's cache (no request), a
// later one GETs it; the status is written only when it changed or NodeStatusReportFrequency (5 m)
// went by, nothing changes here, so a write every 5 m. From the second failed try on,
// closeAllConns. (kubelet PATCHes nodes/NAME/status; the stand-in has no PATCH, so a PUT.)
func (k *kubelet) statusLoop() {
	wait := 100 * time.Millisecond
	for {
		r := k.c.do("node-register", "POST", "/api/v1/nodes", map[string]interface{}{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]interface{}{"name": k.node}}, requestTimeout)
		if r.err == nil && (r.code == 201 || r.code == 409) {
			break
		}
		if !sleep(k.c.ctx, wait) {
			return
		}
		if wait *= 2; wait > maxEnsureBackoff {
			wait = maxEnsureBackoff
		}
	}
	close(k.registered)
	lastReport := time.Now()
	for sleep(k.c.ctx, jitter(statusFrequency, 0.04)) {
		for i := 0; i < maxUpdateRetries && k.c.ctx.Err() == nil; i++ {
			var node map[string]interface{}
			if i == 0 {
				node = k.nodeCache.last()
			} else {
				r := k.c.do("node-get", "GET", "/api/v1/nodes/"+k.node, nil, requestTimeout)
				if r.err == nil && r.code == 200 {
					json.Unmarshal(r.body, &node)
				}
			}
			ok := node != nil
			if ok && time.Since(lastReport) >= statusReportEvery {
				node["status"] = map[string]interface{}{"conditions": []interface{}{map[string]interface{}{
					"type": "Ready", "status": "True", "lastHeartbeatTime": microtime()}}}
				r := k.c.do("node-status", "PUT", "/api/v1/nodes/"+k.node, node, requestTimeout)
				ok = r.err == nil && r.code == 200
				if ok {
					lastReport = time.Now()
				}
			}
			if ok {
				break
			}
			if i > 0 {
				k.closeAll()
			}
		}
	}
}

func copyObject(m map[string]interface{}) map[string]interface{} {
	b, _ := json.Marshal(m)
	var out map[string]interface{}
	json.Unmarshal(b, &out)
	return out
}
