// SPDX-License-Identifier: Apache-2.0
// metav1.Status bodies and the generic object the API serves.
//
// Status: the field order and the omitempty rules of metav1.Status (k8s.io/apimachinery
// pkg/apis/meta/v1/types.go: kind, apiVersion, metadata, status, message, reason, details, code);
// the messages of the constructors in k8s.io/apimachinery pkg/api/errors/errors.go (NewNotFound,
// NewAlreadyExists, NewResourceExpired, NewTimeoutError, NewForbidden, NewMethodNotSupported) as
// the apiserver answers them (pkg/endpoints/handlers/responsewriters/status.go).
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

type statusDetails struct {
	Name              string `json:"name,omitempty"`
	Group             string `json:"group,omitempty"`
	Kind              string `json:"kind,omitempty"`
	RetryAfterSeconds int32  `json:"retryAfterSeconds,omitempty"`
}

type status struct {
	Kind       string         `json:"kind"`
	APIVersion string         `json:"apiVersion"`
	Metadata   struct{}       `json:"metadata"`
	Status     string         `json:"status,omitempty"`
	Message    string         `json:"message,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Details    *statusDetails `json:"details,omitempty"`
	Code       int            `json:"code,omitempty"`
}

func newStatus(code int, reason, message string, details *statusDetails) *status {
	return &status{Kind: "Status", APIVersion: "v1", Status: "Failure", Code: code, Reason: reason, Message: message, Details: details}
}

// The bodies, as the apiserver writes them for each case.
func statusUnauthorized() *status {
	// pkg/endpoints/handlers/responsewriters/errors.go: Unauthorized -> NewUnauthorized("Unauthorized")
	return newStatus(401, "Unauthorized", "Unauthorized", nil)
}

func statusNotFound(resource, group, name string) *status {
	return newStatus(404, "NotFound", fmt.Sprintf("%s %q not found", qualified(resource, group), name),
		&statusDetails{Name: name, Group: group, Kind: resource})
}

func statusPathNotFound() *status {
	// a path no handler serves: the NotFound handler (pkg/server/mux) answers the "404 page not
	// found" of net/http in text; for API groups the apiserver answers a NotFound Status with
	// message "the server could not find the requested resource" (NewGenericServerResponse).
	return newStatus(404, "NotFound", "the server could not find the requested resource", &statusDetails{})
}

func statusAlreadyExists(resource, group, name string) *status {
	return newStatus(409, "AlreadyExists", fmt.Sprintf("%s %q already exists", qualified(resource, group), name),
		&statusDetails{Name: name, Group: group, Kind: resource})
}

func statusConflict(resource, group, name string) *status {
	// NewConflict(qualifiedResource, name, fmt.Errorf(OptimisticLockErrorMsg)): 409, reason Conflict.
	return newStatus(409, "Conflict", fmt.Sprintf("Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", qualified(resource, group), name),
		&statusDetails{Name: name, Group: group, Kind: resource})
}

func statusExpired(message string) *status {
	// NewResourceExpired: 410, reason Expired, no details.
	return newStatus(410, "Expired", message, nil)
}

func statusTimeout() *status {
	// pkg/endpoints/handlers/finisher/finisher.go: NewTimeoutError("request did not complete within
	// requested timeout - " + ctx.Err(), 0) -> 504, reason Timeout, "details":{}.
	return newStatus(504, "Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded", &statusDetails{})
}

func statusInternal(err error) *status {
	return newStatus(500, "InternalError", fmt.Sprintf("Internal error occurred: %v", err), &statusDetails{})
}

func statusMethodNotSupported(resource, group, verb string) *status {
	return newStatus(405, "MethodNotAllowed", fmt.Sprintf("%s is not supported on resources of kind %q", verb, qualified(resource, group)),
		&statusDetails{Group: group, Kind: resource})
}

func statusBadRequest(msg string) *status {
	return newStatus(400, "BadRequest", msg, nil)
}

func qualified(resource, group string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

func writeStatus(w http.ResponseWriter, s *status) {
	writeJSON(w, s.Code, s)
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = 500, []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"encode","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
	w.Write([]byte("\n"))
}

// objectMeta: the fields of metav1.ObjectMeta the stand-in keeps, in its field order
// (k8s.io/apimachinery pkg/apis/meta/v1/types.go). creationTimestamp has no omitempty there (a
// metav1.Time marshals as null when zero), hence the pointer.
type objectMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp *string           `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// object is any API object: kind, apiVersion and metadata first (as the typed structs put them),
// then the kind's own fields (data, subsets, endpoints, ...) in name order.
type object struct {
	Kind       string
	APIVersion string
	Metadata   objectMeta
	Rest       map[string]json.RawMessage
}

func (o *object) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if v, ok := m["kind"]; ok {
		json.Unmarshal(v, &o.Kind)
	}
	if v, ok := m["apiVersion"]; ok {
		json.Unmarshal(v, &o.APIVersion)
	}
	if v, ok := m["metadata"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &o.Metadata); err != nil {
			return fmt.Errorf("metadata: %v", err)
		}
	}
	delete(m, "kind")
	delete(m, "apiVersion")
	delete(m, "metadata")
	delete(m, "status") // no kind the stand-in serves keeps a status it would honour
	o.Rest = m
	return nil
}

func (o object) MarshalJSON() ([]byte, error) {
	var b []byte
	b = append(b, '{')
	first := true
	add := func(k string, v []byte) {
		if !first {
			b = append(b, ',')
		}
		first = false
		kb, _ := json.Marshal(k)
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, v...)
	}
	if o.Kind != "" {
		v, _ := json.Marshal(o.Kind)
		add("kind", v)
	}
	if o.APIVersion != "" {
		v, _ := json.Marshal(o.APIVersion)
		add("apiVersion", v)
	}
	mb, err := json.Marshal(o.Metadata)
	if err != nil {
		return nil, err
	}
	add("metadata", mb)
	keys := make([]string, 0, len(o.Rest))
	for k := range o.Rest {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add(k, o.Rest[k])
	}
	return append(b, '}'), nil
}
