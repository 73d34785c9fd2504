package auth

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Attributes are what a request asks to do, as an authorizer sees it.
type Attributes struct {
	// ResourceRequest: a request on a resource (else on Path).
	ResourceRequest bool
	// Verb is the resource verb (get, list, watch, create, ...) or, for
	// other paths, the lower-case HTTP method.
	Verb                                             string
	APIGroup, Resource, Subresource, Namespace, Name string
	Path                                             string
}

// forbidden is the 403 an authorizer's denial of verb on a gives user, in
// kube-apiserver's words (responsewriters.ForbiddenStatusError), with
// reason appended if not empty.
func forbidden(u User, verb string, a Attributes, reason ...string) error {
	suffix := ""
	if len(reason) > 0 && reason[0] != "" {
		suffix = ": " + reason[0]
	}
	if !a.ResourceRequest {
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("User %q cannot %s path %q%s", u.Name, verb, a.Path, suffix))
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	scope := "at the cluster scope"
	if a.Namespace != "" {
		scope = fmt.Sprintf("in the namespace %q", a.Namespace)
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}, a.Name,
		fmt.Errorf("User %q cannot %s resource %q in API group %q %s%s", u.Name, verb, resource, a.APIGroup, scope, suffix))
}

// ImpersonationRefused is Impersonate with nothing allowed, for callers
// that have no authorizer: the error for a request that asks to act as
// someone else, or nil when it does not.
//
// Deprecated: use Impersonate with the authorizer.
func ImpersonationRefused(h http.Header, u User, a Attributes) error {
	_, err := Impersonate(h, u, a, func(User, Attributes) bool { return false })
	return err
}

// Impersonate returns the user a request with headers h, sent by u to do
// a, acts as: u itself when h asks for no impersonation
// (Impersonate-User, -Group, -Uid, -Extra-*), else the impersonated user
// if allowed, the authorizer, lets u impersonate it. It follows
// kube-apiserver v1.37 (legacy and constrained impersonation) and
// answers with its errors: 400 for groups, uid or extras without a user,
// 403 with its texts for a refusal. Impersonate does not modify h; the
// caller should remove the impersonation headers before passing the
// request on, as Kubernetes does.
//
// The modes are tried in Kubernetes' order, the first that allows the
// impersonation winning:
//
//   - associated-node: a service account impersonating the node its token
//     is bound to (extra authentication.kubernetes.io/node-name);
//   - arbitrary-node: system:node:<name> with no groups, uid or extras;
//   - serviceaccount: system:serviceaccount:<ns>:<name> likewise;
//   - user-info: any other user;
//
// each needing verb impersonate-on:<mode>:<a.Verb> on a itself and verb
// impersonate:<mode> on the impersonated user (users, nodes or
// serviceaccounts), uid (uids), each group (groups) and each extra value
// (userextras/<key>) in API group authentication.k8s.io; and last
//
//   - legacy: verb impersonate on users (or serviceaccounts) and groups in
//     the core group, uids and userextras in authentication.k8s.io.
//
// When none allows it, the first mode's refusal is the answer. The
// impersonated user gets group system:authenticated (system:anonymous:
// system:unauthenticated) unless it asked for system:unauthenticated; a
// service account without requested groups gets its service-account
// groups, a node (constrained) system:nodes.
//
// Kubernetes tries first the mode that last allowed the same requesting
// user, which changes which refusal is reported; Impersonate has no such
// memory, an Impersonator has.
func Impersonate(h http.Header, u User, a Attributes, allowed func(u User, a Attributes) bool) (User, error) {
	var im Impersonator
	return im.Impersonate(h, u, a, allowed)
}

// Impersonator is Impersonate with kube-apiserver's memory of the mode
// that last allowed each requesting user (by name; at most 10,000), tried
// first next time. The zero value is ready to use; it is safe for
// concurrent use.
type Impersonator struct {
	mu    sync.Mutex
	modes map[string]int // requesting user name -> index in impersonationModes
}

const maxRememberedModes = 10000

// Impersonate is the package's Impersonate, trying first the mode that
// last allowed u.
func (im *Impersonator) Impersonate(h http.Header, u User, a Attributes, allowed func(u User, a Attributes) bool) (User, error) {
	wanted, err := impersonationHeaders(h)
	if err != nil || wanted == nil {
		return u, err
	}
	im.mu.Lock()
	first, remembered := im.modes[u.Name]
	im.mu.Unlock()
	order := make([]int, 0, len(impersonationModes))
	if remembered {
		order = append(order, first)
	}
	for i := range impersonationModes {
		if !remembered || i != first {
			order = append(order, i)
		}
	}
	var firstErr error
	for _, i := range order {
		got, ok, err := impersonationModes[i].check(wanted, u, a, allowed)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !ok {
			continue
		}
		im.mu.Lock()
		if im.modes == nil || len(im.modes) >= maxRememberedModes {
			im.modes = make(map[string]int)
		}
		im.modes[u.Name] = i
		im.mu.Unlock()
		return got, nil
	}
	if firstErr == nil {
		firstErr = apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("all impersonation modes failed"))
	}
	return User{}, firstErr
}

// impersonationHeaders returns the user h asks for, nil if none, as
// kube-apiserver's processImpersonationHeaders.
func impersonationHeaders(h http.Header) (*user.DefaultInfo, error) {
	wanted := &user.DefaultInfo{
		Name: h.Get(authenticationv1.ImpersonateUserHeader),
		UID:  h.Get(authenticationv1.ImpersonateUIDHeader),
	}
	wanted.Groups = append(wanted.Groups, h[authenticationv1.ImpersonateGroupHeader]...)
	hasGroups := len(h[authenticationv1.ImpersonateGroupHeader]) > 0
	hasExtra := false
	for k, vs := range h {
		if !strings.HasPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			continue
		}
		hasExtra = true
		if len(vs) == 0 {
			continue
		}
		key := strings.ToLower(k[len(authenticationv1.ImpersonateUserExtraHeaderPrefix):])
		if unescaped, err := url.PathUnescape(key); err == nil {
			key = unescaped
		}
		if wanted.Extra == nil {
			wanted.Extra = map[string][]string{}
		}
		wanted.Extra[key] = append(wanted.Extra[key], vs...)
	}
	if wanted.Name == "" {
		if wanted.UID != "" || hasGroups || hasExtra {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("requested %#v without impersonating a user name", wanted))
		}
		return nil, nil
	}
	return wanted, nil
}

// impersonationMode is one of Kubernetes' ways to allow impersonation.
type impersonationMode struct {
	// mode is the constrained mode's name, "" for legacy.
	mode string
	// applies tells whether the mode is for the wanted user (nil: always).
	applies func(wanted *user.DefaultInfo, requestor User) bool
	// associated marks associated-node, whose checks see the requestor's
	// extra keys only and the node name as "*".
	associated bool
}

var impersonationModes = []impersonationMode{
	{mode: "associated-node", associated: true, applies: func(w *user.DefaultInfo, r User) bool {
		node, ok := nodeName(w.Name)
		if !ok || !onlyUsername(w) {
			return false
		}
		if _, _, ok := serviceAccountName(r.Name); !ok {
			return false
		}
		v := r.Extra[serviceaccount.NodeNameKey]
		return len(v) == 1 && v[0] == node
	}},
	{mode: "arbitrary-node", applies: func(w *user.DefaultInfo, _ User) bool {
		_, ok := nodeName(w.Name)
		return ok && onlyUsername(w)
	}},
	{mode: "serviceaccount", applies: func(w *user.DefaultInfo, _ User) bool {
		_, _, ok := serviceAccountName(w.Name)
		return ok && onlyUsername(w)
	}},
	{mode: "user-info", applies: func(w *user.DefaultInfo, _ User) bool {
		_, isNode := nodeName(w.Name)
		_, _, isSA := serviceAccountName(w.Name)
		return !isNode && !isSA
	}},
	{}, // legacy
}

// check returns the impersonated user if m allows it, false if m does not
// apply, or m's refusal.
func (m impersonationMode) check(wanted *user.DefaultInfo, requestor User, a Attributes, allowed func(User, Attributes) bool) (User, bool, error) {
	if m.applies != nil && !m.applies(wanted, requestor) {
		return User{}, false, nil
	}
	constrained := m.mode != ""
	if m.associated {
		keys := slices.Sorted(maps.Keys(requestor.Extra))
		requestor.Extra = map[string][]string{"authentication.kubernetes.io/associated-node-keys": keys}
	}
	verb, group := "impersonate", ""
	if constrained {
		verb, group = "impersonate:"+m.mode, authenticationv1.GroupName
		on := "impersonate-on:" + m.mode + ":" + a.Verb
		if !allowed(requestor, withVerb(a, on)) {
			return User{}, false, forbidden(requestor, on, a)
		}
	}
	check := func(attrs Attributes, reason string) error {
		if reason == "" && allowed(requestor, attrs) {
			return nil
		}
		return forbidden(requestor, attrs.Verb, attrs, reason)
	}
	actual := User{Name: wanted.Name, UID: wanted.UID, Groups: slices.Clone(wanted.Groups), Extra: wanted.Extra}

	// The user name.
	attrs := Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: "users", Name: wanted.Name}
	reason := ""
	if node, ok := nodeName(wanted.Name); ok && constrained {
		attrs.Resource, attrs.Name = "nodes", node
		if m.associated {
			attrs.Name = "*" // the check must hold for every node name
		}
		if len(wanted.Groups) > 0 {
			reason = fmt.Sprintf("when impersonating a node, cannot impersonate groups %q", wanted.Groups)
		}
		actual.Groups = []string{user.NodesGroup}
	}
	if ns, name, ok := serviceAccountName(wanted.Name); ok {
		attrs.Resource, attrs.Namespace, attrs.Name = "serviceaccounts", ns, name
		if constrained && len(wanted.Groups) > 0 {
			reason = fmt.Sprintf("when impersonating a service account, cannot impersonate groups %q", wanted.Groups)
		}
		if len(wanted.Groups) == 0 {
			actual.Groups = serviceaccount.MakeGroupNames(ns)
		}
	}
	if err := check(attrs, reason); err != nil {
		return User{}, false, err
	}

	if wanted.UID != "" {
		if err := check(Attributes{ResourceRequest: true, Verb: verb, APIGroup: authenticationv1.GroupName, Resource: "uids", Name: wanted.UID}, ""); err != nil {
			return User{}, false, err
		}
	}

	if len(wanted.Groups) > 0 {
		attrs := Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: "groups"}
		if err := m.checkGroups(wanted.Groups, attrs, constrained, requestor, allowed, check); err != nil {
			return User{}, false, err
		}
	}

	if len(wanted.Extra) > 0 {
		attrs := Attributes{ResourceRequest: true, Verb: verb, APIGroup: authenticationv1.GroupName, Resource: "userextras"}
		if err := checkExtra(wanted.Extra, attrs, constrained, requestor, allowed, check); err != nil {
			return User{}, false, err
		}
	}

	if actual.Name == UserAnonymous {
		actual.Groups = ensureGroup(actual.Groups, GroupUnauthenticated)
	} else if !slices.Contains(actual.Groups, GroupUnauthenticated) {
		actual.Groups = ensureGroup(actual.Groups, GroupAuthenticated)
	}
	return actual.clone(), true, nil
}

// manyChecks is Kubernetes' count of groups or extra values from which a
// constrained mode first asks for all of them at once (name "*").
const manyChecks = 4

func (m impersonationMode) checkGroups(groups []string, attrs Attributes, constrained bool, requestor User, allowed func(User, Attributes) bool, check func(Attributes, string) error) error {
	if constrained {
		if slices.Contains(groups, "") {
			return check(attrs, "impersonating the empty string group is not allowed")
		}
		if slices.Contains(groups, GroupMasters) {
			attrs.Name = GroupMasters
			return check(attrs, "impersonating the system:masters group is not allowed")
		}
		if len(groups) >= manyChecks {
			all := attrs
			all.Name = "*"
			if allowed(requestor, all) {
				return nil
			}
		}
	}
	for _, g := range groups {
		attrs.Name = g
		if err := check(attrs, ""); err != nil {
			return err
		}
	}
	return nil
}

func checkExtra(extra map[string][]string, attrs Attributes, constrained bool, requestor User, allowed func(User, Attributes) bool, check func(Attributes, string) error) error {
	if constrained {
		if err := validateExtra(extra); err != nil {
			return check(attrs, err.Error())
		}
		n := 0
		for _, vs := range extra {
			n += len(vs)
		}
		if len(extra) >= manyChecks || n >= manyChecks {
			all := attrs
			all.Subresource, all.Name = "*", "*"
			if allowed(requestor, all) {
				return nil
			}
		}
	}
	// Kubernetes walks the map in random order; sorted keys make the
	// reported refusal stable.
	for _, key := range slices.Sorted(maps.Keys(extra)) {
		attrs.Subresource = key
		for _, v := range extra[key] {
			attrs.Name = v
			if err := check(attrs, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateExtra(extra map[string][]string) error {
	fp := field.NewPath("extra", "key")
	for _, key := range slices.Sorted(maps.Keys(extra)) {
		values := extra[key]
		if key == "" {
			return errors.New("impersonating the empty string key in extra is not allowed")
		}
		if err := utilvalidation.IsDomainPrefixedPath(fp, key).ToAggregate(); err != nil {
			return fmt.Errorf("impersonating an invalid key in extra is not allowed: %w", err)
		}
		if key != strings.ToLower(key) {
			return fmt.Errorf("impersonating a non-lowercase key in extra is not allowed: %q", key)
		}
		if len(values) == 0 {
			return errors.New("impersonating empty values in extra is not allowed")
		}
		if slices.Contains(values, "") {
			return errors.New("impersonating the empty string value in extra is not allowed")
		}
	}
	return nil
}

func withVerb(a Attributes, verb string) Attributes {
	a.Verb = verb
	return a
}

func ensureGroup(groups []string, g string) []string {
	if slices.Contains(groups, g) {
		return groups
	}
	return append(slices.Clip(groups), g)
}

func onlyUsername(u *user.DefaultInfo) bool {
	return u.UID == "" && len(u.Groups) == 0 && len(u.Extra) == 0
}

// nodeName splits system:node:<name>, name a DNS subdomain.
func nodeName(s string) (string, bool) {
	name, ok := strings.CutPrefix(s, "system:node:")
	if !ok || len(validation.NameIsDNSSubdomain(name, false)) != 0 {
		return "", false
	}
	return name, true
}

// serviceAccountName splits system:serviceaccount:<namespace>:<name>.
func serviceAccountName(s string) (namespace, name string, ok bool) {
	namespace, name, err := serviceaccount.SplitUsername(s)
	return namespace, name, err == nil
}
