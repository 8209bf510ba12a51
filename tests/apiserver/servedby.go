// SPDX-License-Identifier: Apache-2.0
// A test-only response header naming the stand-in that answered, so a client behind a load
// balancer can tell which apiserver served it (kube-apiserver sends no such header).
package main

import "net/http"

// servedByHeader carries --name on every response when --name is set.
const servedByHeader = "X-Standin-Name"

func withServedBy(inner http.Handler, name string) http.Handler {
	if name == "" {
		return inner
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(servedByHeader, name)
		inner.ServeHTTP(w, r)
	})
}
