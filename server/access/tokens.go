package access

import (
	"context"
	"errors"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// serviceAccounts is the served core/v1 serviceaccounts.
func (a *Access) serviceAccounts() *registry.Resource {
	res, ok := a.cfg.Registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"})
	if !ok {
		panic("access: serviceaccounts not served")
	}
	return res
}

// ServiceAccount looks a service account up for the authenticator
// (auth.ServiceAccountLookup): a token stops working when its account is
// deleted or replaced by another of the same name. It reads the watch
// cache, so it costs no etcd read.
func (a *Access) ServiceAccount(ctx context.Context, ns, name string) (uid string, ok bool, err error) {
	req := &objects.Request{Verb: "get", Resource: a.serviceAccounts(), Namespace: ns, Name: name}
	obj, err := a.objects.Get(ctx, req, &metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	case obj.GetDeletionTimestamp() != nil:
		return "", false, nil // being deleted: as kube-apiserver, no longer valid
	}
	return string(obj.GetUID()), true, nil
}

// tokenReview answers a TokenReview with what the authenticator makes of
// its token.
func (a *Access) tokenReview(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if a.cfg.Authenticator == nil {
		return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Group: res.Group, Resource: res.Plural}, "create")
	}
	return answer(obj, func(r *authenticationv1.TokenReview) error {
		if r.Spec.Token == "" {
			return invalidReview(res, field.ErrorList{field.Required(field.NewPath("spec", "token"), "")})
		}
		u, audiences, ok, err := a.cfg.Authenticator.AuthenticateToken(ctx, r.Spec.Token, r.Spec.Audiences)
		r.Status = authenticationv1.TokenReviewStatus{Authenticated: ok}
		switch {
		case ok:
			r.Status.User, r.Status.Audiences = userInfo(&u), audiences
		case err != nil:
			r.Status.Error = err.Error()
		}
		return nil
	})
}

// tokenRequest issues a token for the service account req names (its
// token subresource), as kube-apiserver's TokenRequest does: audiences
// default to the API's, expirationSeconds to an hour and at least ten
// minutes; a token bound to an object names a Secret of the account's
// namespace (objwatch serves no pods or nodes).
func (a *Access) tokenRequest(ctx context.Context, req *objects.Request, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	sa, err := a.objects.Get(ctx, &objects.Request{User: req.User, Verb: "get", Resource: req.Resource, Namespace: req.Namespace, Name: req.Name}, nil)
	if err != nil {
		return nil, err
	}
	tr := registry.TokenRequestKind()
	return answer(obj, func(r *authenticationv1.TokenRequest) error {
		if len(r.Spec.Audiences) == 0 {
			r.Spec.Audiences = a.cfg.TokenIssuer.APIAudiences()
		}
		if r.Spec.ExpirationSeconds == nil {
			s := int64(auth.DefaultTokenExpiration / time.Second)
			r.Spec.ExpirationSeconds = &s
		}
		var bound *auth.BoundObject
		if ref := r.Spec.BoundObjectRef; ref != nil {
			if ref.Kind != "Secret" || (ref.APIVersion != "" && ref.APIVersion != "v1") {
				return invalidReview(tr, field.ErrorList{field.NotSupported(field.NewPath("spec", "boundObjectRef", "kind"), ref.Kind, []string{"Secret"})})
			}
			secrets, _ := a.cfg.Registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "secrets"})
			s, err := a.objects.Get(ctx, &objects.Request{Verb: "get", Resource: secrets, Namespace: req.Namespace, Name: ref.Name}, nil)
			if err != nil {
				return err
			}
			if ref.UID != "" && ref.UID != s.GetUID() {
				return apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, ref.Name, errors.New("the UID in the bound object reference does not match the UID in record"))
			}
			bound = &auth.BoundObject{Kind: "Secret", Name: ref.Name, UID: string(s.GetUID())}
		}
		token, exp, err := a.cfg.TokenIssuer.Issue(req.Namespace, req.Name, string(sa.GetUID()), r.Spec.Audiences,
			time.Duration(*r.Spec.ExpirationSeconds)*time.Second, bound)
		var ee *auth.ExpirationError
		if errors.As(err, &ee) {
			return invalidReview(tr, field.ErrorList{field.Invalid(field.NewPath("spec", "expirationSeconds"), *r.Spec.ExpirationSeconds, ee.Error())})
		}
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		r.Name, r.Namespace = req.Name, req.Namespace
		r.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
		r.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(exp)}
		return nil
	})
}
