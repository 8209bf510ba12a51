// SPDX-License-Identifier: Apache-2.0
// A host agent beside the kubelet (a CNI agent's shape): its own clientset, so its own HTTP/2
// connection, several informers, and a read every 2 s.

package main

import (
	"net/url"
	"time"
)

// agentLoops: watches of every Node, Pod, EndpointSlice and Namespace (what a CNI agent such as
// Cilium's informs itself of), and a GET of its node every 2 s (an agent's own calls; it also
// gives the failed-request figure a steady rate). The GETs start once the kubelet registered the
// node, so that a 404 before then is not counted.
func agentLoops(c *client, node string, registered <-chan struct{}) []func() {
	get := func() {
		select {
		case <-registered:
		case <-c.ctx.Done():
			return
		}
		for {
			t := time.Now()
			c.do("agent-get", "GET", "/api/v1/nodes/"+node, nil, requestTimeout)
			if !sleep(c.ctx, 2*time.Second-time.Since(t)) {
				return
			}
		}
	}
	return []func(){get,
		newReflector(c, "nodes", "/api/v1/nodes", url.Values{}, false).run,
		newReflector(c, "pods", "/api/v1/pods", url.Values{}, false).run,
		newReflector(c, "endpointslices", "/apis/discovery.k8s.io/v1/endpointslices", url.Values{}, false).run,
		newReflector(c, "namespaces", "/api/v1/namespaces", url.Values{}, false).run,
	}
}
