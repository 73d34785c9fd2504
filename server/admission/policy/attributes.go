package policy

import (
	"context"

	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
	record *audit.Record // the request's, or nil
	user   user.Info
	object runtime.Object // a.Object, or nil for a delete (never a typed nil)
	old    runtime.Object
	// scale: the write is through /scale, and object and old are the
	// Scales of a.Object and a.Old, as kube-apiserver's ScaleREST hands
	// admission (a mutation of object is written back by scaleBack).
	scale bool
}

func newAttributes(ctx context.Context, a *objects.Attempt) (*attributes, error) {
	at := &attributes{a: a, record: audit.RecordFrom(ctx), user: userInfo(a.Request)}
	sp := a.Request.Resource.Scale
	at.scale = a.Request.Subresource == "scale" && sp != nil
	if a.Object != nil {
		at.object = a.Object
		if at.scale {
			v, err := sp.ScaleView(a.Object)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			at.object = v
		}
	}
	if a.Old != nil {
		at.old = a.Old
		if at.scale {
			v, err := sp.ScaleView(a.Old)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			at.old = v
		}
	}
	return at, nil
}

// scaleBack writes a mutated Scale's replicas to the attempt's object.
func (t *attributes) scaleBack() error {
	if !t.scale || t.a.Object == nil {
		return nil
	}
	if err := t.a.Request.Resource.Scale.SetReplicas(t.a.Object, t.object.(*unstructured.Unstructured)); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
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
	return t.a.Request.Resource.KindFor(t.a.Request.Subresource)
}

func (t *attributes) GetUserInfo() user.Info { return t.user }

// AddAnnotation adds an annotation to the request's audit record, if the
// audit policy records the request (the server's own writes are recorded
// without admission annotations).
func (t *attributes) AddAnnotation(key, value string) error {
	if r := t.record; r != nil && !r.AddAnnotation(key, value) {
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
