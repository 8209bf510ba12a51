// SPDX-License-Identifier: Apache-2.0
// Authentication and the little authorization the stand-in does.
//
// Authentication: the x509 authenticator (k8s.io/apiserver pkg/authentication/request/x509/x509.go):
// the presented chain is verified against --client-ca-file with ExtKeyUsageClientAuth; user =
// subject CN, groups = subject O. No certificate, or one that does not verify: anonymous if
// --anonymous-auth, else 401 with the Unauthorized Status
// (pkg/endpoints/handlers/responsewriters/errors.go, via pkg/endpoints/filters/authentication.go).
//
// Authorization: an authenticated user may do anything (the stand-in has no RBAC). Anonymous gets
// what the default RBAC role system:public-info-viewer grants system:unauthenticated: GET on the
// non-resource URLs /healthz, /livez, /readyz, /version and /version/ (plugin/pkg/auth/authorizer/
// rbac/bootstrappolicy/policy.go in kubernetes/kubernetes, not mirrored here; the sub-paths such
// as /readyz/etcd are not in it), and the 403 Forbidden Status anywhere else, worded as
// pkg/endpoints/handlers/responsewriters/errors.go Forbidden does.
package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
)

type userInfo struct {
	Name   string
	Groups []string
}

type ctxKey int

const userKey ctxKey = 0

func (s *server) authenticate(r *http.Request) (*userInfo, bool) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && s.clientCAs != nil {
		certs := r.TLS.PeerCertificates
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{
			Roots:         s.clientCAs,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err == nil && certs[0].Subject.CommonName != "" {
			groups := append([]string{}, certs[0].Subject.Organization...)
			return &userInfo{Name: certs[0].Subject.CommonName, Groups: append(groups, "system:authenticated")}, true
		}
	}
	if s.opt.anonymous {
		return &userInfo{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}, true
	}
	return nil, false
}

var publicInfoPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true, "/version/": true}

func (s *server) withAuth(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.authenticate(r)
		if !ok {
			writeStatus(w, statusUnauthorized())
			return
		}
		if u.Name == "system:anonymous" && !(r.Method == "GET" && publicInfoPaths[r.URL.Path]) {
			writeStatus(w, forbidden(u.Name, r))
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey, u)))
	})
}

// forbidden words the 403 as the apiserver does for a resource or a non-resource request.
func forbidden(user string, r *http.Request) *status {
	verb := strings.ToLower(r.Method)
	if rr, ok := parseResourcePath(r.URL.Path); ok {
		switch {
		case r.Method == "GET" && rr.name == "" && isWatch(r):
			verb = "watch"
		case r.Method == "GET" && rr.name == "":
			verb = "list"
		case r.Method == "POST":
			verb = "create"
		case r.Method == "PUT":
			verb = "update"
		}
		msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q", user, verb, rr.resource, rr.group)
		if rr.namespace != "" {
			msg += fmt.Sprintf(" in the namespace %q", rr.namespace)
		} else {
			msg += " at the cluster scope"
		}
		what := qualified(rr.resource, rr.group)
		if rr.name != "" {
			what += fmt.Sprintf(" %q", rr.name)
		}
		return newStatus(403, "Forbidden", what+" is forbidden: "+msg, &statusDetails{Name: rr.name, Group: rr.group, Kind: rr.resource})
	}
	return newStatus(403, "Forbidden", fmt.Sprintf("forbidden: User %q cannot %s path %q", user, verb, r.URL.Path), &statusDetails{})
}
