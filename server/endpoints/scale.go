package endpoints

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// The /scale subresource of custom resources whose CRD version declares
// subresources.scale, served as Kubernetes' apiextensions-apiserver serves
// it (registry/customresource ScaleREST): an autoscaling/v1 Scale view of
// the object. A write through it changes only the object's spec replicas
// field; the object is then prepared and validated as an update through the
// main resource, so a negative count is 422 Invalid and a change bumps
// metadata.generation.

// scaleResource describes autoscaling/v1 Scale for checkTypeMeta, table and
// discovery, with the columns Kubernetes prints for a CRD's scale.
var scaleResource = &registry.Resource{
	Group: "autoscaling", Version: "v1", Kind: "Scale",
	Columns: []registry.Column{
		{Name: "Desired", Type: "integer", Description: "Number of desired replicas", JSONPath: ".spec.replicas"},
		{Name: "Available", Type: "integer", Description: "Number of actual replicas", JSONPath: ".status.replicas"},
		{Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"},
	},
}

// noSpecReplicas stands, as in Kubernetes, for an absent spec replicas
// field in the Scale a patch applies to: a patch that does not set it is
// a 400.
const noSpecReplicas = math.MinInt32

// serveScale serves get, update and patch of a custom resource's /scale.
func (a *API) serveScale(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo) error {
	res := req.Resource
	switch info.verb {
	case "get":
		return a.getScale(w, r, req)
	case "update":
		return a.updateScale(w, r, req, info)
	case "patch":
		return a.patchScale(w, r, req, info)
	}
	return apierrors.NewMethodNotSupported(gr(res), info.verb)
}

func (a *API) getScale(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	obj, err := a.getObject(r, req)
	if err != nil {
		return err
	}
	res := req.Resource
	sc, found, err := scaleOf(res.Scale, obj)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if !found {
		// Kubernetes answers so too; a PUT of the Scale sets the field.
		return apierrors.NewInternalError(fmt.Errorf("the spec replicas field %q does not exist", res.Scale.SpecReplicas))
	}
	return respondScale(w, r, sc)
}

// updateScale implements PUT of a Scale: its spec.replicas is written to
// the object. A resourceVersion or uid in its metadata is a precondition.
func (a *API) updateScale(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo) error {
	res := req.Resource
	opts, u, err := a.bodies.readWrite(r, scaleResource)
	if err != nil {
		return err
	}
	if err := checkNamed(u, res, info); err != nil {
		return err
	}
	want, bodyWarnings, err := decodeScale(u, opts)
	if err != nil {
		return err
	}
	addWarnings(w, bodyWarnings)
	if _, err := objects.ParseRV(want.ResourceVersion); err != nil {
		return apistatus.Invalid(scaleResource.GVK().GroupKind(), info.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), want.ResourceVersion, "must be a number")})
	}
	out, err := a.objects.Update(r.Context(), req, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if want.UID != "" && want.UID != cur.GetUID() {
			return nil, apierrors.NewConflict(gr(res), info.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", want.UID, cur.GetUID()))
		}
		return withReplicas(res.Scale, cur, want.Spec.Replicas, want.ResourceVersion)
	})
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	return respondScaleOf(w, r, res, out.Object)
}

// patchScale implements PATCH of a Scale: the patch applies to the Scale
// of the current object, and the result's spec.replicas is written to it.
func (a *API) patchScale(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo) error {
	res := req.Resource
	opts, err := parseWriteOptions(r)
	if err != nil {
		return err
	}
	if isApply(r) {
		return a.applyScale(w, r, req, info, opts)
	}
	p, err := a.bodies.readPatch(r, res)
	if err != nil {
		return err
	}
	// The body's warnings are the last attempt's, as the update's are.
	var bodyWarnings []string
	out, err := a.objects.Update(r.Context(), req, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		bodyWarnings = nil
		old, found, err := scaleOf(res.Scale, cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if !found {
			old.Spec.Replicas = noSpecReplicas
		}
		orig, err := json.Marshal(old)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		u, err := p.applyTo(orig, nil, scaleResource)
		if err != nil {
			return nil, err
		}
		if u.GetName() != info.name {
			return nil, apistatus.BadRequest("the name of the object (%s) does not match the name on the URL (%s)", u.GetName(), info.name)
		}
		if err := checkNamespace(u, res, info); err != nil {
			return nil, err
		}
		sc, ws, err := decodeScale(u, opts)
		if err != nil {
			return nil, err
		}
		bodyWarnings = ws
		if sc.Spec.Replicas == noSpecReplicas {
			return nil, apistatus.BadRequest("the spec replicas field %q cannot be empty", res.Scale.SpecReplicas)
		}
		// Unless the patch pins a resourceVersion, it applies to the
		// current object (and is retried on conflict).
		rv := sc.ResourceVersion
		if rv == cur.GetResourceVersion() && !p.setsRV() {
			rv = ""
		}
		return withReplicas(res.Scale, cur, sc.Spec.Replicas, rv)
	})
	addWarnings(w, bodyWarnings)
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	return respondScaleOf(w, r, res, out.Object)
}

// applyScale is server-side apply through the scale subresource: the
// body, an autoscaling/v1 Scale, is applied to the Scale of the current
// object with the Scale's share of its managedFields, as kube-apiserver
// does (see fields.Manager.ApplyScale, whose answers, failures included,
// are kube-apiserver's), and the result's spec.replicas and managedFields
// are written to the object.
func (a *API) applyScale(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo, opts objects.WriteOptions) error {
	res := req.Resource
	if a.cfg.FieldManager == nil {
		return apistatus.New(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "server-side apply is not enabled on this server")
	}
	patch, err := a.bodies.readApply(r)
	if err != nil {
		return err
	}
	out, err := a.objects.ApplySubresource(r.Context(), req, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		old, found, err := scaleOf(res.Scale, cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if !found {
			old.Spec.Replicas = noSpecReplicas
		}
		sc, managed, err := a.cfg.FieldManager.ApplyScale(res, cur, old, patch, opts.FieldManager, opts.Force)
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); ok {
				return nil, err
			}
			// kube-apiserver answers the field manager's plain errors
			// as a 500 with the error's text, without a reason.
			return nil, apistatus.New(http.StatusInternalServerError, "", err.Error())
		}
		if sc.Spec.Replicas == noSpecReplicas {
			return nil, apistatus.BadRequest("the spec replicas field %q cannot be empty", res.Scale.SpecReplicas)
		}
		rv := sc.ResourceVersion
		if patch.GetResourceVersion() == "" {
			rv = ""
		}
		obj, err := withReplicas(res.Scale, cur, sc.Spec.Replicas, rv)
		if err != nil {
			return nil, err
		}
		obj.SetManagedFields(managed)
		return obj, nil
	})
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	return respondScaleOf(w, r, res, out.Object)
}

// withReplicas sets obj's spec replicas and pins its resourceVersion to rv
// ("" for none).
func withReplicas(p *registry.ScalePaths, obj *unstructured.Unstructured, replicas int32, rv string) (*unstructured.Unstructured, error) {
	if p.Validate != nil {
		if errs := p.Validate(replicas); len(errs) > 0 {
			return nil, apistatus.Invalid(scaleResource.GVK().GroupKind(), obj.GetName(), errs)
		}
	}
	if err := unstructured.SetNestedField(obj.Object, int64(replicas), scalePath(p.SpecReplicas)...); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	obj.SetResourceVersion(rv)
	return obj, nil
}

// decodeScale converts a decoded body to a Scale with the JSON decoder
// Kubernetes uses (so a count beyond int32 is an error), handling unknown
// fields per fieldValidation as normalize does.
func decodeScale(u *unstructured.Unstructured, opts objects.WriteOptions) (*autoscalingv1.Scale, []string, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	var sc autoscalingv1.Scale
	unknown, err := kjson.UnmarshalStrict(b, &sc, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	var warnings []string
	switch {
	case len(unknown) == 0 || opts.FieldValidation == "Ignore":
	case opts.FieldValidation == "Strict":
		return nil, nil, apistatus.BadRequest("%v", runtime.NewStrictDecodingError(unknown))
	default:
		for _, e := range unknown {
			warnings = append(warnings, e.Error())
		}
	}
	return &sc, warnings, nil
}

// scaleOf returns obj's Scale, and whether obj has the spec replicas field
// (the Scale says 0 when it has not).
func scaleOf(p *registry.ScalePaths, obj *unstructured.Unstructured) (*autoscalingv1.Scale, bool, error) {
	return p.ScaleOf(obj)
}

// scalePath splits a scale path such as ".spec.replicas" into fields.
func scalePath(p string) []string { return registry.ScalePath(p) }

// respondScaleOf writes the Scale of obj, the result of a write.
func respondScaleOf(w http.ResponseWriter, r *http.Request, res *registry.Resource, obj *unstructured.Unstructured) error {
	sc, _, err := scaleOf(res.Scale, obj)
	if err != nil {
		return apistatus.BadRequest("%v", err)
	}
	return respondScale(w, r, sc)
}

// respondScale writes a Scale as the client asked for it (see negotiate).
func respondScale(w http.ResponseWriter, r *http.Request, sc *autoscalingv1.Scale) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return respond(w, r, scaleResource, http.StatusOK, &unstructured.Unstructured{Object: m})
}
