// SPDX-License-Identifier: Apache-2.0
// Request bodies in Kubernetes protobuf, read-only and for ConfigMap only: client-go's clientset
// (and so `kubectl create configmap`) sends application/vnd.kubernetes.protobuf and accepts JSON
// back, and it falls back to JSON on a 415 only for CBOR (k8s.io/client-go rest/client.go), so
// the stand-in has to read it. Responses are always JSON.
//
// The envelope: the 4 bytes "k8s\x00", then runtime.Unknown {typeMeta=1 {apiVersion=1, kind=2},
// raw=2, contentEncoding=3, contentType=4} (k8s.io/apimachinery pkg/runtime/generated.proto and
// serializer/protobuf/protobuf.go); ConfigMap {metadata=1, data=2 (map), binaryData=3 (map),
// immutable=4} (k8s.io/api core/v1/generated.proto); ObjectMeta {name=1, generateName=2,
// namespace=3, labels=11, annotations=12} (k8s.io/apimachinery pkg/apis/meta/v1/generated.proto);
// maps are repeated {key=1, value=2} entries.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

var protoMagic = []byte("k8s\x00")

type pbField struct {
	num  int
	wire int
	v    uint64 // varint
	b    []byte // length-delimited
}

func pbFields(b []byte) ([]pbField, error) {
	var out []pbField
	for len(b) > 0 {
		key, n := pbVarint(b)
		if n <= 0 {
			return nil, errors.New("protobuf: bad key")
		}
		b = b[n:]
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			v, n := pbVarint(b)
			if n <= 0 {
				return nil, errors.New("protobuf: bad varint")
			}
			f.v, b = v, b[n:]
		case 2:
			l, n := pbVarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("protobuf: bad length")
			}
			f.b, b = b[n:n+int(l)], b[n+int(l):]
		case 1:
			if len(b) < 8 {
				return nil, errors.New("protobuf: short fixed64")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return nil, errors.New("protobuf: short fixed32")
			}
			b = b[4:]
		default:
			return nil, fmt.Errorf("protobuf: wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

func pbVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func pbMapEntry(b []byte) (string, []byte, error) {
	fs, err := pbFields(b)
	if err != nil {
		return "", nil, err
	}
	var k string
	var v []byte
	for _, f := range fs {
		switch f.num {
		case 1:
			k = string(f.b)
		case 2:
			v = f.b
		}
	}
	return k, v, nil
}

func pbObjectMeta(b []byte, m *objectMeta) error {
	fs, err := pbFields(b)
	if err != nil {
		return err
	}
	for _, f := range fs {
		switch f.num {
		case 1:
			m.Name = string(f.b)
		case 2:
			m.GenerateName = string(f.b)
		case 3:
			m.Namespace = string(f.b)
		case 11, 12:
			k, v, err := pbMapEntry(f.b)
			if err != nil {
				return err
			}
			dst := &m.Labels
			if f.num == 12 {
				dst = &m.Annotations
			}
			if *dst == nil {
				*dst = map[string]string{}
			}
			(*dst)[k] = string(v)
		}
	}
	return nil
}

// decodeProtobuf reads a protobuf ConfigMap body into an object.
func decodeProtobuf(body []byte, d *resourceDef) (object, error) {
	var o object
	if !bytes.HasPrefix(body, protoMagic) {
		return o, errors.New("protobuf: no k8s magic")
	}
	fs, err := pbFields(body[len(protoMagic):])
	if err != nil {
		return o, err
	}
	var raw []byte
	for _, f := range fs {
		switch f.num {
		case 1:
			tm, err := pbFields(f.b)
			if err != nil {
				return o, err
			}
			for _, t := range tm {
				if t.num == 1 {
					o.APIVersion = string(t.b)
				} else if t.num == 2 {
					o.Kind = string(t.b)
				}
			}
		case 2:
			raw = f.b
		}
	}
	if d.kind != "ConfigMap" || (o.Kind != "" && o.Kind != "ConfigMap") {
		return o, fmt.Errorf("protobuf bodies are read for ConfigMap only, not %s", d.kind)
	}
	fs, err = pbFields(raw)
	if err != nil {
		return o, err
	}
	data := map[string]string{}
	binary := map[string]string{}
	immutable := false
	hasImmutable := false
	for _, f := range fs {
		switch f.num {
		case 1:
			if err := pbObjectMeta(f.b, &o.Metadata); err != nil {
				return o, err
			}
		case 2, 3:
			k, v, err := pbMapEntry(f.b)
			if err != nil {
				return o, err
			}
			if f.num == 2 {
				data[k] = string(v)
			} else {
				binary[k] = base64.StdEncoding.EncodeToString(v)
			}
		case 4:
			immutable, hasImmutable = f.v != 0, true
		}
	}
	o.Rest = map[string]json.RawMessage{}
	if len(data) > 0 {
		o.Rest["data"], _ = json.Marshal(data)
	}
	if len(binary) > 0 {
		o.Rest["binaryData"], _ = json.Marshal(binary)
	}
	if hasImmutable {
		o.Rest["immutable"], _ = json.Marshal(immutable)
	}
	return o, nil
}
