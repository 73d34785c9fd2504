package kube

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/registry"
)

// strategy is registry.Strategy and registry.Preparer for one version of a
// built-in kind whose rules are Kubernetes' own registry strategy: objects
// are decoded into the version's Go type from k8s.io/api, defaulted with
// the defaulters k8s.io/kubernetes registers for it, converted to the
// internal type its strategy and validation take, and converted back.
// It is safe for concurrent use (Kubernetes' strategies are).
type strategy struct {
	gvk      schema.GroupVersionKind
	resource string // plural
	create   rest.RESTCreateStrategy
	update   rest.RESTUpdateStrategy
	// status is the strategy of /status, nil when the kind has none.
	status rest.RESTUpdateStrategy
	// subresources are the strategies of the kind's other update
	// subresources (a CertificateSigningRequest's approval).
	subresources map[string]rest.RESTUpdateStrategy
}

var (
	_ registry.Strategy        = (*strategy)(nil)
	_ registry.RequestPreparer = (*strategy)(nil)
)

// internalVersion is the group version of gvk's internal type.
func internalVersion(gvk schema.GroupVersionKind) schema.GroupVersion {
	return schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal}
}

// decode converts obj, an object of gvk as JSON decodes it, into gvk's Go
// type and applies its defaults, as kube-apiserver's decoder does. It
// returns the paths of the fields the type does not have. managedFields are
// left out: the field manager keeps them and no strategy reads them.
func decode(gvk schema.GroupVersionKind, obj map[string]any) (runtime.Object, []string, error) {
	ext, err := legacyscheme.Scheme.New(gvk)
	if err != nil {
		return nil, nil, err
	}
	var unknown []string
	err = any(runtime.DefaultUnstructuredConverter).(interface {
		FromUnstructuredWithValidation(u map[string]any, obj any, returnUnknownFields bool) error
	}).FromUnstructuredWithValidation(registry.WithoutManagedFields(obj), ext, true)
	if err != nil {
		if !runtime.IsStrictDecodingError(err) {
			return nil, nil, err
		}
		for _, e := range err.(interface{ Errors() []error }).Errors() {
			unknown = append(unknown, strings.Trim(strings.TrimPrefix(e.Error(), "unknown field "), `"`))
		}
	}
	legacyscheme.Scheme.Default(ext)
	return ext, unknown, nil
}

// toInternal decodes obj (see decode) and converts it to the internal type.
func toInternal(gvk schema.GroupVersionKind, obj map[string]any) (runtime.Object, []string, error) {
	ext, unknown, err := decode(gvk, obj)
	if err != nil {
		return nil, nil, err
	}
	in, err := legacyscheme.Scheme.UnsafeConvertToVersion(ext, internalVersion(gvk))
	if err != nil {
		return nil, nil, err
	}
	return in, unknown, nil
}

// fromInternal converts in back to gvk's version, with its defaults, and
// replaces obj's content with it, keeping obj's managedFields. The
// defaults are those kube-apiserver's decoder applies when it reads the
// object back from storage, which is what its answer to a write is: a
// strategy that resets status (a claim's) answers with status' defaults
// (phase Pending).
func fromInternal(gvk schema.GroupVersionKind, in runtime.Object, obj map[string]any) error {
	ext, err := legacyscheme.Scheme.UnsafeConvertToVersion(in, gvk.GroupVersion())
	if err != nil {
		return err
	}
	legacyscheme.Scheme.Default(ext)
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ext)
	if err != nil {
		return err
	}
	replace(obj, out)
	return nil
}

// replace makes obj's content out's, keeping obj's managedFields and
// leaving out a null creationTimestamp (typed objects write one;
// Kubernetes omits it).
func replace(obj, out map[string]any) {
	md, _ := obj["metadata"].(map[string]any)
	mf, hasMF := md["managedFields"]
	for k := range obj {
		delete(obj, k)
	}
	for k, v := range out {
		obj[k] = v
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if hasMF {
			md["managedFields"] = mf
		}
		if md["creationTimestamp"] == nil {
			delete(md, "creationTimestamp")
		}
	}
}

// Normalize decodes obj into the kind's type with its defaults.
func (s *strategy) Normalize(obj, _ map[string]any) ([]string, error) {
	ext, unknown, err := decode(s.gvk, obj)
	if err != nil {
		return nil, err
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ext)
	if err != nil {
		return nil, err
	}
	out["apiVersion"], out["kind"] = s.gvk.GroupVersion().String(), s.gvk.Kind
	replace(obj, out)
	return unknown, nil
}

// Stored: objects are stored as they are served.
func (s *strategy) Stored(map[string]any) error { return nil }

// PrepareForCreate runs the kind's PrepareForCreate and Canonicalize,
// with no requesting user.
func (s *strategy) PrepareForCreate(obj map[string]any) {
	s.PrepareForCreateRequest(context.Background(), obj)
}

// PrepareForCreateRequest runs the kind's PrepareForCreate and
// Canonicalize for the request (and its user) in ctx.
func (s *strategy) PrepareForCreateRequest(ctx context.Context, obj map[string]any) {
	in, _, err := toInternal(s.gvk, obj)
	if err != nil {
		return // Validate reports it
	}
	s.create.PrepareForCreate(s.requestContext(ctx, in, "create", ""), in)
	s.create.Canonicalize(in)
	_ = fromInternal(s.gvk, in, obj)
}

// PrepareForUpdate runs the kind's (or its status strategy's)
// PrepareForUpdate and Canonicalize, with the generation reset to old's
// first, as kube-apiserver's BeforeUpdate does (the object service keeps
// uid and creationTimestamp itself).
func (s *strategy) PrepareForUpdate(obj, old map[string]any, subresource string) {
	if s.isAction(subresource) {
		return
	}
	in, _, err := toInternal(s.gvk, obj)
	if err != nil {
		return
	}
	was, _, err := toInternal(s.gvk, old)
	if err != nil {
		return
	}
	om, err1 := meta.Accessor(in)
	wm, err2 := meta.Accessor(was)
	if err1 != nil || err2 != nil {
		return
	}
	om.SetGeneration(wm.GetGeneration())
	u, subresource := s.updateStrategy(subresource)
	u.PrepareForUpdate(s.context(in, "update", subresource), in, was)
	u.Canonicalize(in)
	_ = fromInternal(s.gvk, in, obj)
}

// Validate runs the kind's validation as kube-apiserver's rest.BeforeCreate
// and BeforeUpdate do, for a request without a user (see ValidateRequest).
func (s *strategy) Validate(obj, old map[string]any) field.ErrorList {
	errs, _ := s.ValidateRequest(context.Background(), obj, old, "")
	return errs
}

// ValidateStatus validates an update through /status.
func (s *strategy) ValidateStatus(obj, old map[string]any) field.ErrorList {
	errs, _ := s.ValidateRequest(context.Background(), obj, old, "status")
	return errs
}

// ValidateRequest runs the kind's validation as kube-apiserver's
// rest.BeforeCreate and BeforeUpdate do (the strategy's checks, the common
// metadata checks and the declarative validation of the kind's version),
// with the update strategy of subresource (see updateStrategy), and, when
// that passes, the strategy's WarningsOnCreate or WarningsOnUpdate. An
// action's write (a pod's binding) is neither validated nor warned of, as
// kube-apiserver writes it.
func (s *strategy) ValidateRequest(ctx context.Context, obj, old map[string]any, subresource string) (field.ErrorList, []string) {
	if old != nil && s.isAction(subresource) {
		return nil, nil
	}
	in, _, err := toInternal(s.gvk, obj)
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath(""), nil, err.Error())}, nil
	}
	if old == nil {
		ctx := s.requestContext(ctx, in, "create", "")
		if errs := rest.ValidateCreate(ctx, in, s.create); len(errs) > 0 {
			return errs, nil
		}
		return nil, s.create.WarningsOnCreate(ctx, in)
	}
	was, _, err := toInternal(s.gvk, old)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath(""), fmt.Errorf("decoding the current object: %w", err))}, nil
	}
	u, subresource := s.updateStrategy(subresource)
	ctx = s.requestContext(ctx, in, "update", subresource)
	if errs := rest.ValidateUpdate(ctx, in, was, u); len(errs) > 0 {
		return errs, nil
	}
	return nil, u.WarningsOnUpdate(ctx, in, was)
}

// isAction reports whether subresource is an action's, whose writes
// kube-apiserver makes without the kind's strategy.
func (s *strategy) isAction(subresource string) bool {
	_, own := s.subresources[subresource]
	return subresource != "" && subresource != "status" && subresource != "scale" && !own
}

// updateStrategy is the strategy of an update through subresource (not an
// action's) and the subresource the strategy's context names.
func (s *strategy) updateStrategy(subresource string) (rest.RESTUpdateStrategy, string) {
	if u, ok := s.subresources[subresource]; ok {
		return u, subresource
	}
	if subresource == "status" && s.status != nil {
		return s.status, subresource
	}
	return s.update, ""
}

// context is the request context Kubernetes' strategies read, without a
// user.
func (s *strategy) context(obj runtime.Object, verb, subresource string) context.Context {
	return s.requestContext(context.Background(), obj, verb, subresource)
}

// requestContext is the request context Kubernetes' strategies read: the
// request's group, version, resource and subresource (declarative
// validation picks the version's rules by them), its namespace and the
// user (auth.User) in parent.
func (s *strategy) requestContext(parent context.Context, obj runtime.Object, verb, subresource string) context.Context {
	ctx := genericapirequest.WithRequestInfo(parent, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb,
		APIPrefix: "apis", APIGroup: s.gvk.Group, APIVersion: s.gvk.Version,
		Resource: s.resource, Subresource: subresource,
	})
	if m, err := meta.Accessor(obj); err == nil {
		ctx = genericapirequest.WithNamespace(ctx, m.GetNamespace())
	}
	if u, ok := auth.UserFrom(parent); ok {
		ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra})
	}
	return ctx
}
