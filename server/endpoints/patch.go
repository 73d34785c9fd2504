package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// maxJSONPatchOps is Kubernetes' limit on operations in one JSON patch.
const maxJSONPatchOps = 10000

// limitJSONPatchCopies bounds how much the "copy" operations of one JSON
// patch may add to the document (a copy of an array into itself doubles
// it: 30 of them would take terabytes) to n bytes, as kube-apiserver
// bounds them to its request size limit. The library's limit is global to
// the process: the smallest one asked for wins.
func limitJSONPatchCopies(n int64) {
	for {
		old := atomic.LoadInt64(&jsonpatch.AccumulatedCopySizeLimit)
		if n <= 0 || (old > 0 && old <= n) || atomic.CompareAndSwapInt64(&jsonpatch.AccumulatedCopySizeLimit, old, n) {
			return
		}
	}
}

// Patch bodies are applied with the JSON patch library apimachinery itself
// uses (evanphx/json-patch v4) and apimachinery's strategic merge patch.
func (a *API) patch(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	res := req.Resource
	opts, err := parseWriteOptions(r)
	if err != nil {
		return err
	}
	if isApply(r) {
		return a.apply(w, r, req, opts)
	}
	p, err := a.bodies.readPatch(r, res)
	if err != nil {
		return err
	}
	out, err := a.objects.Update(r.Context(), req, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		orig, err := json.Marshal(cur.Object)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		obj, err := p.applyTo(orig, res.PatchSchema, res)
		if err != nil {
			return nil, err
		}
		// Unless the patch pins a resourceVersion, it applies to the
		// current object (and is retried on conflict).
		if v, ok, _ := unstructured.NestedString(obj.Object, "metadata", "resourceVersion"); ok && v == cur.GetResourceVersion() && !p.setsRV() {
			obj.SetResourceVersion("")
		}
		return obj, nil
	})
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	return respond(w, r, res, http.StatusOK, out.Object)
}

// isApply reports whether r is a server-side apply: a PATCH of
// application/apply-patch+yaml or, as kube-apiserver serving CBOR accepts
// it, application/apply-patch+cbor.
func isApply(r *http.Request) bool {
	mt := mediaType(r)
	return mt == string(types.ApplyYAMLPatchType) || mt == string(types.ApplyCBORPatchType)
}

// apply is server-side apply: a PATCH whose body, YAML (or JSON, which is
// YAML) or CBOR, is the applied configuration of the fieldManager. It
// answers 201 when it created the object.
func (a *API) apply(w http.ResponseWriter, r *http.Request, req *objects.Request, opts objects.WriteOptions) error {
	res := req.Resource
	patch, err := a.bodies.readApply(r)
	if err != nil {
		return err
	}
	out, err := a.objects.Apply(r.Context(), req, patch, opts)
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if out.Created {
		code = http.StatusCreated
	}
	return respond(w, r, res, code, out.Object)
}

// readApply reads the body of an apply, as kube-apiserver decodes it
// (sigs.k8s.io/yaml), but with integers as int64, as the service decodes
// every object.
func (bs *bodies) readApply(r *http.Request) (*unstructured.Unstructured, error) {
	body, err := bs.readBody(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if mediaType(r) == string(types.ApplyCBORPatchType) {
		u := &unstructured.Unstructured{}
		if _, _, err := cborCodec.Decode(body, nil, u); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
		}
		return checkApplyMetadata(u.Object)
	}
	j, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error encoding patch: %v", err))
	}
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: error unmarshaling JSON: while decoding JSON: %v", err))
	}
	return checkApplyMetadata(m)
}

// checkApplyMetadata is an applied configuration, refused unless its
// metadata, if any, is an object.
func checkApplyMetadata(m map[string]any) (*unstructured.Unstructured, error) {
	if m == nil {
		m = map[string]any{}
	}
	if md, ok := m["metadata"]; ok && md != nil {
		if _, ok := md.(map[string]any); !ok {
			return nil, apistatus.BadRequest("metadata must be an object")
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// patchBody is a PATCH request's patch, read and checked.
type patchBody struct {
	pt   string // media type
	body []byte
	ops  jsonpatch.Patch // decoded JSON patch operations
}

// readPatch reads a PATCH request's body and checks its type: strategic
// merge patch only where res has a PatchSchema.
func (bs *bodies) readPatch(r *http.Request, res *registry.Resource) (*patchBody, error) {
	pt := mediaType(r)
	switch pt {
	case "application/json-patch+json", "application/merge-patch+json":
	case "application/strategic-merge-patch+json":
		if res.PatchSchema == nil {
			return nil, apistatus.New(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
				"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
		}
	default:
		return nil, apistatus.New(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got %s)", pt))
	}
	body, err := bs.readBody(r)
	if err != nil {
		return nil, err
	}
	if !json.Valid(body) {
		// As kube-apiserver, for every patch type but apply; this also
		// refuses bodies nested deeper than 10,000 levels.
		return nil, apierrors.NewBadRequest("invalid JSON patch")
	}
	p := &patchBody{pt: pt, body: body}
	if pt == "application/json-patch+json" {
		if p.ops, err = jsonpatch.DecodePatch(body); err != nil {
			return nil, apistatus.BadRequest("the JSON patch is malformed: %v", err)
		}
		if len(p.ops) > maxJSONPatchOps {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOps, len(p.ops)))
		}
		if err := checkRootOps(p.ops); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkRootOps refuses the operations on the whole document (path "")
// without a value that the JSON patch library dereferences: a test or a
// replace of the root without "value" (or with null) panics in it, and
// kube-apiserver v1.37.2 panics on them (its stream is reset). They fail
// as the library fails them with a value: no document equals no value,
// and a replacement of the root must be an object.
func checkRootOps(ops jsonpatch.Patch) error {
	for _, op := range ops {
		if path, err := op.Path(); err != nil || path != "" || op["value"] != nil {
			continue
		}
		switch op.Kind() {
		case "test":
			return invalidPatch(fmt.Errorf("testing value  failed: %w", jsonpatch.ErrTestFailed))
		case "replace":
			return invalidPatch(errors.New("replace operation value must be object or array"))
		}
	}
	return nil
}

// applyTo patches the JSON document orig and decodes the result, an
// object of typeOf.
func (p *patchBody) applyTo(orig []byte, schema any, typeOf *registry.Resource) (*unstructured.Unstructured, error) {
	patched, err := p.apply(orig, schema)
	if err != nil {
		return nil, err
	}
	obj, err := objects.Decode(patched)
	if err != nil {
		return nil, err
	}
	return obj, checkTypeMeta(obj, typeOf)
}

// apply patches the JSON document orig. schema is the Go value strategic
// merge patch needs (Resource.PatchSchema).
func (p *patchBody) apply(orig []byte, schema any) ([]byte, error) {
	var patched []byte
	var err error
	switch p.pt {
	case "application/json-patch+json":
		patched, err = p.ops.Apply(orig)
	case "application/merge-patch+json":
		patched, err = jsonpatch.MergePatch(orig, p.body)
	default:
		patched, err = strategicpatch.StrategicMergePatch(orig, p.body, schema)
	}
	if err != nil {
		return nil, patchError(err)
	}
	return patched, nil
}

// setsRV reports whether the patch itself names a resourceVersion.
func (p *patchBody) setsRV() bool {
	if p.pt == "application/json-patch+json" {
		for _, op := range p.ops {
			if path, err := op.Path(); err == nil && path == "/metadata/resourceVersion" {
				return true
			}
		}
		return false
	}
	var m struct {
		Metadata struct {
			ResourceVersion *string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	return json.Unmarshal(p.body, &m) == nil && m.Metadata.ResourceVersion != nil
}

func patchError(err error) error {
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		return err
	}
	return invalidPatch(err)
}

func invalidPatch(err error) error {
	return apistatus.New(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("the patch could not be applied: %v", err))
}
