package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/objwatch/objwatch/server/registry"
)

// maxJSONPatchOps is Kubernetes' limit on operations in one JSON patch.
const maxJSONPatchOps = 10000

// Patch bodies are applied with the JSON patch library apimachinery itself
// uses (evanphx/json-patch v4) and apimachinery's strategic merge patch.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	opts, err := parseWriteOptions(r)
	if err != nil {
		return err
	}
	pt := mediaType(r)
	switch pt {
	case "application/json-patch+json", "application/merge-patch+json":
	case "application/strategic-merge-patch+json":
		if res.PatchSchema == nil {
			return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
				fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"))
		}
	case "application/apply-patch+yaml", "application/apply-patch+cbor":
		return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"server-side apply is not supported by objwatch yet - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json")
	default:
		return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got %s)", pt))
	}
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	var ops jsonpatch.Patch
	if pt == "application/json-patch+json" {
		if ops, err = jsonpatch.DecodePatch(body); err != nil {
			return badRequest("the JSON patch is malformed: %v", err)
		}
		if len(ops) > maxJSONPatchOps {
			return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOps, len(ops)))
		}
	} else if !json.Valid(body) {
		return badRequest("the patch is not valid JSON")
	}
	out, code, err := s.guaranteedUpdate(w, r.Context(), res, info, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		orig, err := json.Marshal(cur.Object)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		var patched []byte
		switch pt {
		case "application/json-patch+json":
			patched, err = ops.Apply(orig)
		case "application/merge-patch+json":
			patched, err = jsonpatch.MergePatch(orig, body)
		default:
			patched, err = strategicpatch.StrategicMergePatch(orig, body, res.PatchSchema)
		}
		if err != nil {
			return nil, patchError(err)
		}
		obj, err := decodeObject(patched)
		if err != nil {
			return nil, err
		}
		if err := checkTypeMeta(obj, res); err != nil {
			return nil, err
		}
		// Unless the patch pins a resourceVersion, it applies to the
		// current object (and is retried on conflict).
		if v, ok, _ := unstructured.NestedString(obj.Object, "metadata", "resourceVersion"); ok && v == cur.GetResourceVersion() && !patchSetsRV(pt, body, ops) {
			obj.SetResourceVersion("")
		}
		return obj, nil
	})
	if err != nil {
		return err
	}
	return s.respond(w, r, res, code, out)
}

// patchSetsRV reports whether the patch itself names a resourceVersion.
func patchSetsRV(pt string, body []byte, ops jsonpatch.Patch) bool {
	if pt == "application/json-patch+json" {
		for _, op := range ops {
			if p, err := op.Path(); err == nil && p == "/metadata/resourceVersion" {
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
	return json.Unmarshal(body, &m) == nil && m.Metadata.ResourceVersion != nil
}

func patchError(err error) error {
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		return err
	}
	return invalidPatch(err)
}

func invalidPatch(err error) error {
	return newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("the patch could not be applied: %v", err))
}
