package policy

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/objects"
)

// attributes is admission.Attributes over one objects.Attempt: what
// Kubernetes' admission plugins see of a request. Not safe for concurrent
// use (an Attempt's steps run one after another).
type attributes struct {
	a      *objects.Attempt
	ctx    context.Context
	user   user.Info
	object runtime.Object // a.Object, or nil for a delete (never a typed nil)
	old    runtime.Object
}

func newAttributes(ctx context.Context, a *objects.Attempt) *attributes {
	at := &attributes{a: a, ctx: ctx, user: userInfo(a.Request)}
	if a.Object != nil {
		at.object = a.Object
	}
	if a.Old != nil {
		at.old = a.Old
	}
	return at
}

func (t *attributes) GetName() string {
	if t.a.Request.Name != "" {
		return t.a.Request.Name
	}
	if t.a.Object != nil {
		return t.a.Object.GetName() // a create's name, after generateName
	}
	return ""
}

func (t *attributes) GetNamespace() string { return t.a.Request.Namespace }

func (t *attributes) GetResource() schema.GroupVersionResource { return t.a.Request.Resource.GVR() }

func (t *attributes) GetSubresource() string { return t.a.Request.Subresource }

func (t *attributes) GetOperation() admission.Operation { return admission.Operation(t.a.Operation) }

// GetOperationOptions are the typed options, as admission.k8s.io reports
// them (CreateOptions, UpdateOptions, DeleteOptions).
func (t *attributes) GetOperationOptions() runtime.Object {
	o := t.a.Options
	var dryRun []string
	if o.DryRun {
		dryRun = []string{metav1.DryRunAll}
	}
	switch t.a.Operation {
	case objects.OpCreate:
		return &metav1.CreateOptions{TypeMeta: optionsType("CreateOptions"), DryRun: dryRun, FieldManager: o.FieldManager}
	case objects.OpUpdate:
		return &metav1.UpdateOptions{TypeMeta: optionsType("UpdateOptions"), DryRun: dryRun, FieldManager: o.FieldManager}
	}
	if t.a.Delete != nil {
		d := t.a.Delete.DeepCopy()
		d.TypeMeta = optionsType("DeleteOptions")
		return d
	}
	return &metav1.DeleteOptions{TypeMeta: optionsType("DeleteOptions")}
}

func optionsType(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: kind}
}

func (t *attributes) IsDryRun() bool { return t.a.Request.DryRun }

func (t *attributes) GetObject() runtime.Object { return t.object }

func (t *attributes) GetOldObject() runtime.Object { return t.old }

func (t *attributes) GetKind() schema.GroupVersionKind {
	return t.a.Request.Resource.GVK()
}

func (t *attributes) GetUserInfo() user.Info { return t.user }

// AddAnnotation adds an annotation to the request's audit record, if the
// audit policy records the request (the server's own writes are recorded
// without admission annotations).
func (t *attributes) AddAnnotation(key, value string) error {
	if r := audit.RecordFrom(t.ctx); r != nil && !r.AddAnnotation(key, value) {
		return fmt.Errorf("admission annotation %q already set", key)
	}
	return nil
}

func (t *attributes) AddAnnotationWithLevel(key, value string, _ auditinternal.Level) error {
	return t.AddAnnotation(key, value)
}

// GetReinvocationContext is the attempt's, shared with the mutating
// webhooks, so that a webhook's change reinvokes IfNeeded policies.
func (t *attributes) GetReinvocationContext() admission.ReinvocationContext {
	return t.a.Reinvocation()
}

// serverUser is the user.Info of the server's own writes (Request.User
// nil): the controller that makes them (Request.Actor, a service account
// in kube-system as in Kubernetes), or kube-apiserver's loopback user.
type serverUser struct{ user.DefaultInfo }

func userInfo(req *objects.Request) user.Info {
	if u := req.User; u != nil {
		return &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	}
	if req.Actor == "" {
		return &serverUser{user.DefaultInfo{Name: audit.ServerUser.Name, Groups: audit.ServerUser.Groups}}
	}
	groups := []string{user.AllAuthenticated}
	if rest, ok := strings.CutPrefix(req.Actor, "system:serviceaccount:"); ok {
		ns, _, _ := strings.Cut(rest, ":")
		groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, user.AllAuthenticated}
	}
	return &serverUser{user.DefaultInfo{Name: req.Actor, Groups: groups}}
}

// objectInterfaces are admission.ObjectInterfaces for unstructured
// objects, which is all the object service has. Every resource is served
// in one version here, so a "conversion" is a copy with the kind set.
type objectInterfaces struct {
	mapper runtime.EquivalentResourceMapper
}

func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater     { return unstructuredScheme{} }
func (o objectInterfaces) GetObjectTyper() runtime.ObjectTyper         { return unstructuredScheme{} }
func (o objectInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return unstructuredScheme{} }
func (o objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return unstructuredScheme{} }
func (o objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return o.mapper
}

type unstructuredScheme struct{}

func (unstructuredScheme) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func (unstructuredScheme) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{obj.GetObjectKind().GroupVersionKind()}, false, nil
}

func (unstructuredScheme) Recognizes(schema.GroupVersionKind) bool { return true }

func (unstructuredScheme) Default(runtime.Object) {}

// Convert copies in into out; both are unstructured. The mutating
// dispatcher uses it to write a policy's result back into the attempt's
// object.
func (unstructuredScheme) Convert(in, out, _ any) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return fmt.Errorf("admission policy: cannot convert %T to %T", in, out)
	}
	if src == dst {
		return nil
	}
	gvk := dst.GroupVersionKind()
	dst.Object = runtime.DeepCopyJSON(src.Object)
	if !gvk.Empty() {
		dst.SetGroupVersionKind(gvk)
	}
	return nil
}

func (s unstructuredScheme) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("admission policy: cannot convert %T", in)
	}
	out := u.DeepCopy()
	if gvk, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
		out.SetGroupVersionKind(gvk)
	}
	return out, nil
}

func (unstructuredScheme) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}
