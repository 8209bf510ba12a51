// SPDX-License-Identifier: Apache-2.0
// --goaway-chance, as k8s.io/apiserver pkg/server/filters/goaway.go does it: for an HTTP/2
// request, with that probability the response carries "Connection: close", which Go's HTTP/2
// server turns into a GOAWAY (graceful: the streams in flight finish) instead of sending the
// header. The real flag accepts 0 to 0.02.
package main

import (
	"math/rand"
	"net/http"
	"sync"
)

var goawayRand = struct {
	sync.Mutex
	*rand.Rand
}{Rand: rand.New(rand.NewSource(rand.Int63()))}

func withGoaway(inner http.Handler, chance float64) http.Handler {
	if chance <= 0 {
		return inner
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Proto == "HTTP/2.0" {
			goawayRand.Lock()
			v := goawayRand.Float64()
			goawayRand.Unlock()
			if v < chance {
				w.Header().Set("Connection", "close")
			}
		}
		inner.ServeHTTP(w, r)
	})
}
