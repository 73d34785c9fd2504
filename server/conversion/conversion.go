// Package conversion converts custom resources between the versions of
// their CustomResourceDefinition, as kube-apiserver does for
// spec.conversion.strategy None (None: set apiVersion, prune in the target
// schema) and Webhook (Webhook: ConversionReview calls to the CRD's
// conversion webhook).
//
// # The webhook call
//
// It is kube-apiserver's (k8s.io/apiextensions-apiserver
// pkg/apiserver/conversion webhook_converter.go), made over package webhookclient
// instead of client-go's REST client: a ConversionReview of the first of
// spec.conversion.webhook.conversionReviewVersions objwatch knows (v1 or
// v1beta1) with a new request uid, the desiredAPIVersion and the objects
// not already in it; the answer must be a ConversionReview of that
// version (v1: with the same uid), with result.status Success and one
// converted object per object sent, each of the desired apiVersion and of
// the same kind, name, namespace and uid. Of the metadata, only labels and
// annotations may change (validated as Kubernetes validates them); the
// rest is restored from the object sent, as kube-apiserver restores it.
// The converted objects are then pruned in the schema of their version.
// Failures carry Kubernetes' messages ("conversion webhook for
// example.com/v2, Kind=Widget failed: ...").
//
// Unlike kube-apiserver, which converts one object per call (its storage
// decoder converts each stored object on its own), a Convert of many
// objects makes one call for up to maxBatchObjects objects or
// maxBatchBytes of them: a list read from etcd, a page of a watch cache's
// (re)list, is one ConversionReview, or a few. The bounds keep one answer
// well under the webhook client's 3 MiB limit on a response (objects
// usually grow little in conversion) and one call's latency bounded,
// while a typical list is one call.
//
// # Concurrency
//
// A Webhook and a None are immutable and safe for concurrent use. Convert
// calls the webhook synchronously, within ctx and the call timeout.
package conversion

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/registry/crd"
	"github.com/objwatch/objwatch/server/webhookclient"
)

const (
	// maxBatchObjects and maxBatchBytes bound one ConversionReview: the
	// answer must stay under the webhook client's 3 MiB.
	maxBatchObjects = 500
	maxBatchBytes   = 1 << 20
	// callTimeout is kube-apiserver's default webhook request timeout; a
	// conversion webhook has no timeoutSeconds of its own.
	callTimeout = 30 * time.Second
)

// For returns the converter of a CRD whose Definition is def: a Webhook
// when its conversion strategy is Webhook (calling it through client),
// else a None.
func For(client *webhookclient.Client, c *apiextensionsv1.CustomResourceDefinition, def *crd.Definition) (Converter, error) {
	if !def.Webhook() {
		return None{def: def}, nil
	}
	if client == nil {
		return nil, fmt.Errorf("crd %s: a conversion webhook needs a webhook client", c.Name)
	}
	conv := c.Spec.Conversion
	cc := conv.Webhook.ClientConfig
	ep := webhookclient.Endpoint{CABundle: cc.CABundle}
	if len(bytes.TrimSpace(ep.CABundle)) == 0 {
		ep.CABundle = nil // as kube-apiserver: a blank bundle is none
	}
	switch {
	case cc.URL != nil:
		ep.URL = *cc.URL
	case cc.Service != nil:
		ep.Service = &webhookclient.ServiceRef{Namespace: cc.Service.Namespace, Name: cc.Service.Name}
		if cc.Service.Path != nil {
			ep.Service.Path = *cc.Service.Path
		}
		if cc.Service.Port != nil {
			ep.Service.Port = *cc.Service.Port
		}
	}
	return &Webhook{
		client: client, def: def, ep: ep,
		reviewVersions: append([]string(nil), conv.Webhook.ConversionReviewVersions...),
	}, nil
}

// Converter is what For returns: a registry.Converter.
type Converter interface {
	StorageVersion() string
	Convert(ctx context.Context, objs []*unstructured.Unstructured, version string) error
	Remote() bool
}

// None converts with the None strategy: apiVersion set, the object pruned
// in the target version's schema.
type None struct{ def *crd.Definition }

// StorageVersion is the CRD's storage version.
func (n None) StorageVersion() string { return n.def.StorageVersion().Name() }

// Remote is false: None never calls out.
func (None) Remote() bool { return false }

// Convert converts each object in place.
func (n None) Convert(_ context.Context, objs []*unstructured.Unstructured, version string) error {
	for _, o := range objs {
		if err := n.def.Convert(o.Object, version); err != nil {
			return err
		}
	}
	return nil
}

// Webhook converts through a CRD's conversion webhook.
type Webhook struct {
	client         *webhookclient.Client
	def            *crd.Definition
	ep             webhookclient.Endpoint
	reviewVersions []string
}

// StorageVersion is the CRD's storage version.
func (w *Webhook) StorageVersion() string { return w.def.StorageVersion().Name() }

// Remote is true.
func (w *Webhook) Remote() bool { return true }

// Error is a failed conversion, with kube-apiserver's message.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// Convert converts objs to version: those already in it are only
// pruned, the others sent to the webhook in as few ConversionReviews as
// the batch bounds allow. On error no object is changed.
func (w *Webhook) Convert(ctx context.Context, objs []*unstructured.Unstructured, version string) error {
	to := schema.GroupVersion{Group: w.def.Group(), Version: version}
	if w.def.Version(version) == nil {
		return &Error{fmt.Sprintf("request to convert CR to an invalid group/version: %s", to)}
	}
	var (
		batch []*unstructured.Unstructured
		raws  [][]byte
		size  int
	)
	results := make(map[*unstructured.Unstructured]*unstructured.Unstructured, len(objs))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		out, err := w.call(ctx, batch, raws, to)
		if err != nil {
			return err
		}
		for i, o := range batch {
			results[o] = out[i]
		}
		batch, raws, size = batch[:0], raws[:0], 0
		return nil
	}
	for _, o := range objs {
		gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
		if err != nil || gv.Group != to.Group || w.def.Version(gv.Version) == nil {
			return &Error{fmt.Sprintf("request to convert CR from an invalid group/version: %s", o.GetAPIVersion())}
		}
		if gv == to {
			continue
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			return &Error{fmt.Sprintf("conversion webhook for %v failed: %v", o.GroupVersionKind(), err)}
		}
		if len(batch) > 0 && (len(batch) == maxBatchObjects || size+len(b) > maxBatchBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch, raws, size = append(batch, o), append(raws, b), size+len(b)
	}
	if err := flush(); err != nil {
		return err
	}
	// Everything converted: only now change the caller's objects.
	for _, o := range objs {
		if c, ok := results[o]; ok {
			o.Object = c.Object
		}
	}
	return nil
}

// review is a ConversionReview of either version: their fields are the
// same, and v1beta1's answers are not checked for kind and uid, as in
// Kubernetes.
type review struct {
	metav1.TypeMeta `json:",inline"`
	Request         *reviewRequest  `json:"request,omitempty"`
	Response        *reviewResponse `json:"response,omitempty"`
}

type reviewRequest struct {
	UID               types.UID         `json:"uid"`
	DesiredAPIVersion string            `json:"desiredAPIVersion"`
	Objects           []json.RawMessage `json:"objects"`
}

type reviewResponse struct {
	UID              types.UID         `json:"uid"`
	ConvertedObjects []json.RawMessage `json:"convertedObjects"`
	Result           metav1.Status     `json:"result"`
}

// reviewVersion returns the ConversionReview apiVersion to send: the
// first of the CRD's conversionReviewVersions objwatch knows.
func (w *Webhook) reviewVersion() (string, error) {
	for _, v := range w.reviewVersions {
		switch v {
		case v1beta1.SchemeGroupVersion.Version:
			return v1beta1.SchemeGroupVersion.String(), nil
		case apiextensionsv1.SchemeGroupVersion.Version:
			return apiextensionsv1.SchemeGroupVersion.String(), nil
		}
	}
	return "", errors.New("no supported conversion review versions")
}

// call sends one ConversionReview for objs (raws their encodings) and
// returns the converted objects, checked and with their metadata restored,
// in objs' order. objs are not changed.
func (w *Webhook) call(ctx context.Context, objs []*unstructured.Unstructured, raws [][]byte, to schema.GroupVersion) ([]*unstructured.Unstructured, error) {
	apiVersion, err := w.reviewVersion()
	if err != nil {
		return nil, &Error{err.Error()}
	}
	uid := uuid.NewUUID()
	req := review{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ConversionReview"},
		Request:  &reviewRequest{UID: uid, DesiredAPIVersion: to.String(), Objects: make([]json.RawMessage, len(raws))},
	}
	for i, b := range raws {
		req.Request.Objects[i] = b
	}
	var resp review
	if err := w.client.Post(ctx, w.ep, callTimeout, &req, &resp); err != nil {
		return nil, failure(objs, "failed: %v", callMessage(err))
	}
	return w.converted(objs, apiVersion, uid, &resp, to)
}

// converted checks a webhook's answer resp to a review of apiVersion and
// uid for objs, and returns the converted objects in objs' order.
func (w *Webhook) converted(objs []*unstructured.Unstructured, apiVersion string, uid types.UID, resp *review, to schema.GroupVersion) ([]*unstructured.Unstructured, error) {
	fail := func(format string, args ...any) error { return failure(objs, format, args...) }
	if err := checkResponse(apiVersion, uid, resp); err != nil {
		return nil, fail("failed: %v", err)
	}
	got := resp.Response.ConvertedObjects
	if len(got) != len(objs) {
		return nil, fail("returned %d objects, expected %d", len(got), len(objs))
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, raw := range got {
		// kube-apiserver's wording: that of its list conversion when
		// several objects were sent, of its one-object conversion else.
		bad := func(single string, err error) error {
			if len(objs) > 1 {
				if single == "returned invalid metadata" {
					return fail("returned invalid metadata in object at index %d: %v", i, err)
				}
				return fail("returned invalid converted object at index %d: %v", i, err)
			}
			return fail("%s: %v", single, err)
		}
		c, err := decodeObject(raw)
		if err != nil {
			return nil, bad("returned invalid object", err)
		}
		if e, a := to, c.GroupVersionKind().GroupVersion(); e != a {
			return nil, bad("returned invalid object at index 0", fmt.Errorf("invalid groupVersion (expected %v, received %v)", e, a))
		}
		if e, a := objs[i].GetKind(), c.GetKind(); e != a {
			return nil, bad("returned invalid object at index 0", fmt.Errorf("invalid kind (expected %v, received %v)", e, a))
		}
		if err := validateConverted(objs[i], c); err != nil {
			return nil, bad("returned invalid object", err)
		}
		if err := restoreObjectMeta(objs[i], c); err != nil {
			return nil, bad("returned invalid metadata", err)
		}
		if err := w.def.Prune(c.Object); err != nil {
			return nil, bad("returned invalid object", err)
		}
		out[i] = c
	}
	return out, nil
}

// checkResponse checks the answer's kind, uid and result as
// kube-apiserver does (uid and kind only for v1).
func checkResponse(apiVersion string, uid types.UID, resp *review) error {
	if apiVersion == apiextensionsv1.SchemeGroupVersion.String() {
		want := apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview")
		if got := resp.GroupVersionKind(); got != want {
			return fmt.Errorf("expected webhook response of %v, got %v", want.String(), got.String())
		}
	}
	if resp.Response == nil {
		return errors.New("no response provided")
	}
	if apiVersion == apiextensionsv1.SchemeGroupVersion.String() && resp.Response.UID != uid {
		return fmt.Errorf("expected response.uid=%q, got %q", uid, resp.Response.UID)
	}
	if r := resp.Response.Result; r.Status != metav1.StatusSuccess {
		if r.Message != "" {
			return errors.New(r.Message)
		}
		return fmt.Errorf("response.result.status was '%s', not 'Success'", r.Status)
	}
	return nil
}

// callMessage words a failed call as client-go's REST client does for
// kube-apiserver: a non-200 answer is the generic server response error
// of its status ("an error on the server (\"boom\") has prevented the
// request from succeeding").
func callMessage(err error) string {
	var ce *webhookclient.CallError
	if errors.As(err, &ce) && ce.Status != 0 {
		body := strings.TrimSpace(strings.TrimPrefix(ce.Err.Error(), fmt.Sprintf("the server responded with status %d: ", ce.Status)))
		return apierrors.NewGenericServerResponse(ce.Status, http.MethodPost, schema.GroupResource{}, "", body, 0, true).Error()
	}
	return err.Error()
}

// decodeObject decodes a converted object as the service decodes objects
// (numbers as int64 or float64).
func decodeObject(raw []byte) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not an object")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// validateConverted checks that the identifying metadata did not change,
// with kube-apiserver's messages.
func validateConverted(in, out *unstructured.Unstructured) error {
	if e, a := in.GetKind(), out.GetKind(); e != a {
		return fmt.Errorf("must have the same kind: %v != %v", e, a)
	}
	if e, a := in.GetName(), out.GetName(); e != a {
		return fmt.Errorf("must have the same name: %v != %v", e, a)
	}
	if e, a := in.GetNamespace(), out.GetNamespace(); e != a {
		return fmt.Errorf("must have the same namespace: %v != %v", e, a)
	}
	if e, a := in.GetUID(), out.GetUID(); e != a {
		return fmt.Errorf("must have the same UID: %v != %v", e, a)
	}
	return nil
}

// restoreObjectMeta replaces converted's metadata by a copy of
// original's, keeping converted's labels and annotations (validated when
// they changed), as kube-apiserver does: every other metadata change a
// webhook makes (generation, finalizers, managedFields, ...) is dropped.
func restoreObjectMeta(original, converted *unstructured.Unstructured) error {
	md, found := converted.Object["metadata"]
	if !found {
		return errors.New("missing metadata in converted object")
	}
	response, ok := md.(map[string]any)
	if !ok {
		return fmt.Errorf("invalid metadata of type %T in converted object", md)
	}
	restored := map[string]any{}
	if om, ok := original.Object["metadata"].(map[string]any); ok {
		restored = runtime.DeepCopyJSONValue(om).(map[string]any)
	}
	converted.Object["metadata"] = restored
	for _, fld := range []string{"labels", "annotations"} {
		v, found := response[fld]
		if !found || v == nil {
			delete(restored, fld)
			continue
		}
		got, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("invalid metadata.%s of type %T in converted object", fld, v)
		}
		had, ok := restored[fld].(map[string]any)
		if !ok && restored[fld] != nil {
			return fmt.Errorf("invalid metadata.%s of type %T in original object", fld, restored[fld])
		}
		changed := len(had) != len(got)
		strs := make(map[string]string, len(got))
		for k, v := range got {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("metadata.%s[%s] must be a string, but is %T in converted object", fld, k, v)
			}
			if had[k] != any(s) {
				changed = true
			}
			strs[k] = s
		}
		if changed {
			var errs field.ErrorList
			if fld == "labels" {
				errs = metav1validation.ValidateLabels(strs, field.NewPath("metadata", "labels"))
			} else {
				errs = apivalidation.ValidateAnnotations(strs, field.NewPath("metadata", "annotation"))
			}
			if len(errs) > 0 {
				return errs.ToAggregate()
			}
		}
		restored[fld] = got
	}
	return nil
}

// failure is a conversion error in kube-apiserver's words, which name the
// kind of the first object sent (the one object it sends).
func failure(objs []*unstructured.Unstructured, format string, args ...any) error {
	return &Error{fmt.Sprintf("conversion webhook for %v ", objs[0].GroupVersionKind()) + fmt.Sprintf(format, args...)}
}
