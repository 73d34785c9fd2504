package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Decode parses a JSON object, with numbers as int64 or float64, as the
// service decodes every object: a request body, or a cached object.
func Decode(b []byte) (*unstructured.Unstructured, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, apistatus.BadRequest("the body of the request is not a JSON object")
	}
	m, ok := jsonenc.Decode(b) // apimachinery's decoding, without reflection
	if !ok {
		// Invalid, or what apimachinery repairs: its answer and its error.
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
		}
	}
	if md, ok := m["metadata"]; ok && md != nil {
		if _, ok := md.(map[string]any); !ok {
			return nil, apistatus.BadRequest("metadata must be an object")
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromStorage decodes a stored value and stamps it with its revision and
// the apiVersion of the version it is served as, converting it to that
// version (see decodeStored; a conversion webhook is called without a
// deadline of the caller's).
func FromStorage(res *registry.Resource, kv storage.KeyValue) (*unstructured.Unstructured, error) {
	objs, err := decodeStored(context.Background(), res, []storage.KeyValue{kv})
	if err != nil {
		return nil, err
	}
	return objs[0], nil
}

// decodeStored decodes stored values of res and stamps each with its
// revision and res's apiVersion. Objects of a resource served in several
// versions (res.Versions) are converted from the version each is stored
// in to res's, all in one conversion: one ConversionReview for a page of
// a list. A failed conversion is a *ConversionError.
func decodeStored(ctx context.Context, res *registry.Resource, kvs []storage.KeyValue) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(kvs))
	for i, kv := range kvs {
		m, ok := jsonenc.Decode(kv.Value)
		if !ok {
			if err := json.Unmarshal(kv.Value, &m); err != nil {
				return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
			}
		}
		if err := res.Strategy.Stored(m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out[i] = &unstructured.Unstructured{Object: m}
	}
	if res.Versions != nil && len(out) > 0 {
		if err := res.Versions.Convert(ctx, out, res.Version); err != nil {
			return nil, &ConversionError{Key: kvs[0].Key, Rev: kvs[0].ModRevision, N: len(kvs), Err: err}
		}
	}
	for i, u := range out {
		u.SetAPIVersion(res.APIVersion())
		u.SetKind(res.Kind)
		u.SetResourceVersion(strconv.FormatInt(kvs[i].ModRevision, 10))
	}
	return out, nil
}

// ConversionError is a stored object (or N of them, the first under Key)
// that could not be converted to the version read: its conversion webhook
// failed or answered wrongly. For one object its message is
// kube-apiserver's for an object its storage cannot decode.
type ConversionError struct {
	Key string
	Rev int64
	N   int
	Err error
}

func (e *ConversionError) Error() string {
	if e.N > 1 {
		return e.Err.Error()
	}
	// kube-apiserver's keys are relative to its /registry prefix.
	return e.corrupt(strings.TrimPrefix(e.Key, strings.TrimSuffix(registry.Root, "/")))
}

func (e *ConversionError) corrupt(key string) string {
	return fmt.Sprintf("StorageError: corrupt object, Code: 7, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=%d: %v", key, e.Rev, e.Err)
}

// listError is kube-apiserver's answer to a list that meets an object it
// cannot decode: 500 StorageReadError naming the resource, and the object
// by its whole key (this one with the /registry prefix).
func (e *ConversionError) listError(gr schema.GroupResource) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http500, Reason: metav1.StatusReasonStoreReadError,
		Message: fmt.Sprintf("failed to read one or more %s from the storage: %s", gr, e.corrupt(e.Key)),
	}}
}

func (e *ConversionError) Unwrap() error { return e.Err }

// storedForm encodes obj for storage (see ToStorage) in res's storage
// version: a copy of obj is converted first when obj is in another
// version (converted is then true, and the bytes are not obj's). A failed
// conversion is kube-apiserver's 500 with the converter's message, and
// nothing is written.
func storedForm(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured) (b []byte, converted bool, err error) {
	if res.Versions != nil {
		to := res.Versions.StorageVersion()
		if gv := (schema.GroupVersion{Group: res.Group, Version: to}).String(); obj.GetAPIVersion() != gv {
			c := obj.DeepCopy()
			c.SetResourceVersion("") // as kube-apiserver: not sent to the webhook
			if err := res.Versions.Convert(ctx, []*unstructured.Unstructured{c}, to); err != nil {
				return nil, false, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http500, Message: err.Error()}}
			}
			obj, converted = c, true
		}
	}
	b, err = ToStorage(obj)
	if err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	return b, converted, nil
}

// storedBack is what kube-apiserver answers a write in a version other
// than the storage version with: the stored bytes b (as storedForm
// encoded them) decoded and converted back to res's version, stamped
// with revision rev (none when 0, a dry run's create). A conversion
// webhook may set or default fields the written object did not have;
// they show in the answer, as in Kubernetes, whose storage decodes what
// it wrote. A failed conversion is a 500 with the converter's message.
func storedBack(ctx context.Context, res *registry.Resource, b []byte, rev int64) (*unstructured.Unstructured, error) {
	objs, err := decodeStored(ctx, res, []storage.KeyValue{{Value: b, ModRevision: rev}})
	if err != nil {
		var ce *ConversionError
		if errors.As(err, &ce) {
			err = ce.Err
		}
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http500, Message: err.Error()}}
	}
	if rev == 0 {
		objs[0].SetResourceVersion("")
	}
	return objs[0], nil
}

// http500 is the code of an error kube-apiserver has no Status for.
const http500 = 500

// ToStorage encodes obj for storage: without resourceVersion, which is the
// etcd revision and not stored. obj is changed while it runs (and put
// back): it must not be read concurrently.
func ToStorage(obj *unstructured.Unstructured) ([]byte, error) {
	rv := obj.GetResourceVersion()
	unstructured.RemoveNestedField(obj.Object, "metadata", "resourceVersion")
	var b []byte
	m, err := registry.StorageForm(obj.Object)
	if err == nil {
		restore := managedFieldsForStorage(m)
		b, err = json.Marshal(m)
		restore()
	}
	if rv != "" {
		obj.SetResourceVersion(rv)
	}
	return b, err
}

// ParseRV parses a resourceVersion; "" is 0.
func ParseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, apistatus.BadRequest("invalid resource version %q: must be a non-negative integer", s)
	}
	return n, nil
}

// convertsOnWrite reports whether res's objects are stored in another
// version than res's: its watch cache then holds another form than the
// stored one.
func convertsOnWrite(res *registry.Resource) bool {
	return res.Versions != nil && res.Versions.StorageVersion() != res.Version
}
