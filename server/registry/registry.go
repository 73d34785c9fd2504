// Package registry describes the resources objwatch serves: their names,
// scope, subresources and the strategy that prepares and validates their
// objects. Built-in resources are defined in builtin.go; custom resources are
// added and removed at run time as CustomResourceDefinitions come and go.
//
// Objects are handled as unstructured maps (JSON decoded the way
// k8s.io/apimachinery's unstructured package does) so that built-in and
// custom resources share one code path.
package registry

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Strategy prepares and validates the objects of one resource version.
// Implementations are safe for concurrent use.
type Strategy interface {
	// Normalize decodes obj into the resource's schema: it applies defaults
	// and drops unknown fields, returning their paths so the server can
	// honour fieldValidation=Strict/Warn. A malformed object is an error.
	// old is the current object on update, nil on create.
	Normalize(obj, old map[string]any) (unknown []string, err error)
	// Stored prepares an object read from storage for serving.
	Stored(obj map[string]any) error
	// Validate checks obj, or obj as an update of old when old is not nil.
	Validate(obj, old map[string]any) field.ErrorList
}

// Canonical is a Strategy that may report that its Normalize sets no
// defaults: it only decodes into the schema and drops unknown fields, so
// an object that already fits the schema comes back as it was.
type Canonical interface {
	SetsNoDefaults() bool
}

// Preparer is a Strategy with the rules of its kind for what clients may
// not set (status behind a status subresource, metadata.generation) and
// for updates through /status: custom resources, with Kubernetes' own
// custom resource strategy. The server applies its generic rules for
// these only to resources whose Strategy is not a Preparer.
type Preparer interface {
	// PrepareForCreate resets what a client may not set on a new object.
	PrepareForCreate(obj map[string]any)
	// PrepareForUpdate does the same for the update of old to obj through
	// subresource ("" for the main resource, or "status"); metadata the
	// server keeps is already old's.
	PrepareForUpdate(obj, old map[string]any, subresource string)
	// ValidateStatus validates an update of old to obj through /status.
	ValidateStatus(obj, old map[string]any) field.ErrorList
}

// RequestPreparer is a Preparer whose rules read the request, as
// Kubernetes' strategies do: the requesting user (a
// CertificateSigningRequest records who asked) and the warnings a valid
// write gets (WarningsOnCreate, WarningsOnUpdate). ctx carries the
// request's auth.User. The server calls these instead of, or after, the
// Preparer's methods; custom resources do not implement it.
type RequestPreparer interface {
	Preparer
	// PrepareForCreateRequest is PrepareForCreate for the request in ctx.
	PrepareForCreateRequest(ctx context.Context, obj map[string]any)
	// ValidateRequest validates a create of obj (old nil) or an update of
	// old to obj through subresource (any: status, scale or an action's)
	// for the request in ctx, and returns the warnings a valid write gets,
	// from the same decoding of the objects. The server calls it instead
	// of Validate and ValidateStatus, and passes the subresource to
	// PrepareForUpdate as it is.
	ValidateRequest(ctx context.Context, obj, old map[string]any, subresource string) (field.ErrorList, []string)
}

// Resource is one served resource version. Resources are immutable once
// registered.
type Resource struct {
	Group, Version   string
	Plural, Singular string
	Kind, ListKind   string
	ShortNames       []string
	Categories       []string
	Namespaced       bool
	// Status: the resource has a /status subresource; the main endpoint
	// ignores status changes and /status ignores everything else.
	Status bool
	// UpdateSubresources are more subresources served like /status (get,
	// update, patch of the object) whose rules are the Strategy's, a
	// RequestPreparer: a CertificateSigningRequest's approval.
	UpdateSubresources []string
	// Generation: the server maintains metadata.generation, incremented on
	// every change outside metadata (and status, when Status is set).
	Generation bool
	// Custom resources: updates need metadata.resourceVersion, and strategic
	// merge patch is unsupported (415), as in Kubernetes.
	Custom bool
	// StoragePrefix is the key prefix shared by every version of the
	// resource, ending in "/".
	StoragePrefix string
	// StoredAs, if set, says that the objects are stored as another
	// resource's, under its StoragePrefix (events.k8s.io/v1 events are
	// core/v1 events): Strategy.Stored converts a stored object into this
	// resource's form, StoredAs.ToStorage (through StorageForm) back.
	StoredAs *Conversion
	// Versions, if set, converts the objects of a resource served in
	// several versions that share one storage (custom resources): objects
	// are written in Versions.StorageVersion() and every object read is
	// converted to this resource's version (objects stored in an older
	// storage version too). nil: objects are read as they are stored.
	Versions Converter
	// PatchSchema is a Go value of the resource's type for strategic merge
	// patch; nil when the resource does not support it.
	PatchSchema any
	// FieldLabels adds resource-specific field selector labels to the
	// generic metadata.name and metadata.namespace.
	FieldLabels func(obj *unstructured.Unstructured) fields.Set
	// Strategy prepares and validates objects.
	Strategy Strategy
	// Columns are the extra printer columns for tables (custom resources).
	Columns []Column
	// OpenAPIV3, if set, returns the resource's OpenAPI v3 document
	// (custom resources); built-in documents come from their Go types.
	OpenAPIV3 func() (*spec3.OpenAPI, error)
	// OpenAPIV2, if set, returns the resource's part of /openapi/v2
	// (custom resources).
	OpenAPIV2 func() (*spec.Swagger, error)
	// Scale, if set, gives the resource a /scale subresource (custom
	// resources whose CRD version declares subresources.scale).
	Scale *ScalePaths
	// Lifecycle, if set, is what the resource adds to deletion
	// (namespaces, custom resource definitions).
	Lifecycle *Lifecycle
	// DeprecationWarning, if set, is sent as a Warning with every request
	// to this version (a deprecated custom resource version).
	DeprecationWarning string
	// ValidFieldLabel, if set, reports whether a field selector may use
	// label (with Kubernetes' error); otherwise the labels FieldLabels
	// gives, with metadata.name and metadata.namespace, are allowed.
	ValidFieldLabel func(label string) error
	// ConvertToTable, if set, renders an object or a list (an
	// *unstructured.UnstructuredList) as a Table with Kubernetes' own
	// table convertor (custom resources); rows carry their objects.
	ConvertToTable func(obj runtime.Object) (*metav1.Table, error)
	// Review: the resource only takes creates, which are answered and
	// never stored (TokenReview, SubjectAccessReview and the like); the
	// object service's Review hook computes the answer.
	Review bool
	// CacheOnDemand: the resource's watch cache starts at its first read
	// or watch rather than with the server (built-in kinds that many
	// servers never use: their idle caches would cost goroutines and
	// memory), and /readyz does not wait for it.
	CacheOnDemand bool
	// Reviews are subresources that take a create of another kind, answered
	// like a Review's: a service account's "token" takes a TokenRequest.
	// A review resource with an Action acts on the object instead.
	Reviews map[string]*Resource
	// Action, set on a review subresource's resource, makes a create of
	// it act on the object the request names (a pod's binding and
	// eviction): body is the decoded request, of this resource's kind.
	// nil: the create is answered as a review.
	Action func(ctx context.Context, t ActionTarget, body map[string]any) error
}

// ActionTarget is the object an Action acts on, reached through the
// server's object service: authorized as the action's request (create of
// the subresource), admitted, audited and watched as any write.
type ActionTarget interface {
	// Name is the object's name.
	Name() string
	// Get returns the object.
	Get(ctx context.Context) (map[string]any, error)
	// Update writes mutate's change of (a copy of) the current object, as
	// an update through the action's subresource: the resource's
	// RequestPreparer decides what of its rules apply. An error from
	// mutate is the update's.
	Update(ctx context.Context, mutate func(obj map[string]any) error) error
	// Delete deletes the object.
	Delete(ctx context.Context, opts *metav1.DeleteOptions) error
	// List returns, as the server itself, the objects of another resource
	// in the object's namespace.
	List(ctx context.Context, gvr schema.GroupVersionResource) ([]map[string]any, error)
}

// Converter converts objects between the versions of one resource: a
// custom resource definition's conversion strategy (None or Webhook).
// Implementations are safe for concurrent use.
type Converter interface {
	// StorageVersion is the version objects are written in.
	StorageVersion() string
	// Convert converts objs, each in a version of the resource, to
	// version (of the resource's group), in place: all of them or, with an
	// error, none. A remote converter converts them in as few calls as it
	// can (one ConversionReview for a list).
	Convert(ctx context.Context, objs []*unstructured.Unstructured, version string) error
	// Remote reports whether Convert calls out (a conversion webhook):
	// it may then fail for a while, until the webhook answers again.
	Remote() bool
}

// ScalePaths locate the fields a /scale subresource reads and writes: JSON
// paths in the object starting with a dot, e.g. ".spec.replicas", as in
// CustomResourceDefinition spec.versions[].subresources.scale.
type ScalePaths struct {
	SpecReplicas   string
	StatusReplicas string
	LabelSelector  string // "" when not set
	// Selector, if set, computes the Scale's status.selector instead of
	// LabelSelector (built-in kinds, whose selectors are structured).
	Selector func(obj map[string]any) (string, error)
	// Validate, if set, validates a Scale's spec.replicas before it is
	// written to the object (built-in kinds: an error names the Scale, as
	// kube-apiserver's does).
	Validate func(replicas int32) field.ErrorList
}

// Column is an additional printer column (see
// CustomResourceDefinition.spec.versions[].additionalPrinterColumns).
type Column struct {
	Name, Type, Format, Description, JSONPath string
	Priority                                  int32
	// Value, if set, computes the cell instead of JSONPath (built-in
	// columns such as a ConfigMap's number of keys).
	Value func(obj map[string]any) any
}

// GVR returns the resource's group, version and resource.
func (r *Resource) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Plural}
}

// GVK returns the resource's group, version and kind.
func (r *Resource) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// APIVersion is the apiVersion field of the resource's objects.
func (r *Resource) APIVersion() string {
	return r.GVK().GroupVersion().String()
}

// Key is the storage key of an object.
func (r *Resource) Key(namespace, name string) string {
	if r.Namespaced {
		return r.StoragePrefix + namespace + "/" + name
	}
	return r.StoragePrefix + name
}

// Prefix is the key prefix of a namespace's objects (or of all objects when
// namespace is empty).
func (r *Resource) Prefix(namespace string) string {
	if r.Namespaced && namespace != "" {
		return r.StoragePrefix + namespace + "/"
	}
	return r.StoragePrefix
}

// Verbs are the verbs the resource supports.
func (r *Resource) Verbs() []string {
	if r.Review {
		return []string{"create"}
	}
	if r.Group == "" && r.Plural == "namespaces" {
		// As in Kubernetes: namespaces are deleted one at a time.
		return []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	}
	return []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
}

// Root is the key prefix of every stored object.
const Root = "/registry/"

// StoragePrefix returns the key prefix for a group and resource.
func StoragePrefix(group, plural string) string {
	if group == "" {
		group = "core"
	}
	return Root + group + "/" + plural + "/"
}

// Registry is the set of served resources. It is safe for concurrent use;
// readers see a consistent snapshot.
type Registry struct {
	mu sync.RWMutex
	// byGVR indexes every served version.
	byGVR map[schema.GroupVersionResource]*Resource
	// byPrefix indexes every served version by its StoragePrefix.
	byPrefix map[string][]*Resource
	// preferred lists each group's versions, preferred first.
	versions map[string][]string
	// custom maps a CRD name to the resources it added, and customToken to
	// the token they were built from.
	custom      map[string][]*Resource
	customToken map[string]string
}

// New returns a registry with the built-in resources defined here and
// extra ones (the kinds whose rules come from k8s.io/kubernetes, package
// kube).
func New(extra ...*Resource) *Registry {
	r := &Registry{
		byGVR:    map[schema.GroupVersionResource]*Resource{},
		byPrefix: map[string][]*Resource{},
		versions: map[string][]string{},
		custom:   map[string][]*Resource{},

		customToken: map[string]string{},
	}
	for _, res := range append(builtins(), extra...) {
		r.add(res)
	}
	return r
}

func (r *Registry) add(res *Resource) {
	if res.ListKind == "" {
		res.ListKind = res.Kind + "List"
	}
	r.byGVR[res.GVR()] = res
	r.byPrefix[res.StoragePrefix] = append(r.byPrefix[res.StoragePrefix], res)
	vs := r.versions[res.Group]
	for _, v := range vs {
		if v == res.Version {
			return
		}
	}
	r.versions[res.Group] = sortVersions(append(vs, res.Version))
}

// Get returns the resource for gvr.
func (r *Registry) Get(gvr schema.GroupVersionResource) (*Resource, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	res, ok := r.byGVR[gvr]
	return res, ok
}

// Resources returns every served resource sorted by group, version, plural.
func (r *Registry) Resources() []*Resource {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Resource, 0, len(r.byGVR))
	for _, res := range r.byGVR {
		out = append(out, res)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Plural < b.Plural
	})
	return out
}

// ForKind returns a served resource of group and kind, preferring version
// (any version of a resource shares its storage): what an owner
// reference's apiVersion and kind name.
func (r *Registry) ForKind(group, version, kind string) (*Resource, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var found *Resource
	for _, res := range r.byGVR {
		if res.Group != group || res.Kind != kind {
			continue
		}
		if res.Version == version {
			return res, true
		}
		found = res
	}
	return found, found != nil
}

// ForKey returns a served resource whose objects are stored under key, and
// the namespace and name the key stands for.
func (r *Registry) ForKey(key string) (res *Resource, namespace, name string, ok bool) {
	// The resource whose form the key holds is preferred to one stored as
	// it (StoredAs).
	// Every StoragePrefix is Root + group + "/" + plural + "/".
	tail, found := strings.CutPrefix(key, Root)
	if !found {
		return nil, "", "", false
	}
	group, tail, found1 := strings.Cut(tail, "/")
	plural, _, found2 := strings.Cut(tail, "/")
	if !found1 || !found2 {
		return nil, "", "", false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, cand := range r.byPrefix[Root+group+"/"+plural+"/"] {
		rest, found := strings.CutPrefix(key, cand.StoragePrefix)
		if !found || rest == "" {
			continue
		}
		ns, n, nested := strings.Cut(rest, "/")
		switch {
		case cand.Namespaced && nested && n != "" && !strings.Contains(n, "/"):
		case !cand.Namespaced && !nested:
			ns, n = "", rest
		default:
			continue
		}
		if res == nil || res.StoredAs != nil {
			res, namespace, name, ok = cand, ns, n, true
		}
	}
	return res, namespace, name, ok
}

// Groups returns every group with its versions, preferred version first.
// The core group is "".
func (r *Registry) Groups() map[string][]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string][]string, len(r.versions))
	for g, vs := range r.versions {
		out[g] = append([]string(nil), vs...)
	}
	return out
}

// CustomToken returns the token the CRD's served resources were built from
// (see SetCustom), and whether any are served.
func (r *Registry) CustomToken(crdName string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.customToken[crdName]
	return t, ok
}

// SetCustom replaces the resources served for the CRD named crdName (nil or
// empty removes them). token identifies what they were built from, so
// callers can skip rebuilding (and keep watch caches) when it is unchanged.
// It fails if a resource would shadow one that another definition serves.
func (r *Registry) SetCustom(crdName, token string, resources []*Resource) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range resources {
		if cur, ok := r.byGVR[res.GVR()]; ok && !r.ownedBy(cur, crdName) {
			return fmt.Errorf("registry: %s is already served", res.GVR())
		}
	}
	for _, old := range r.custom[crdName] {
		delete(r.byGVR, old.GVR())
	}
	delete(r.custom, crdName)
	delete(r.customToken, crdName)
	if len(resources) > 0 {
		r.custom[crdName] = resources
		r.customToken[crdName] = token
	}
	r.versions = map[string][]string{}
	r.byPrefix = map[string][]*Resource{}
	for _, res := range resources {
		r.byGVR[res.GVR()] = res
	}
	for _, res := range r.byGVR {
		r.add(res)
	}
	return nil
}

// CustomNames returns the names of the CRDs whose resources are served.
func (r *Registry) CustomNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.custom))
	for name := range r.custom {
		out = append(out, name)
	}
	return out
}

func (r *Registry) ownedBy(res *Resource, crdName string) bool {
	for _, o := range r.custom[crdName] {
		if o == res {
			return true
		}
	}
	return false
}

// sortVersions orders versions the Kubernetes way: GA before beta before
// alpha, higher numbers first, then non-conforming names alphabetically.
func sortVersions(vs []string) []string {
	sort.Slice(vs, func(i, j int) bool { return versionLess(vs[j], vs[i]) })
	return vs
}

// versionLess reports whether a has lower priority than b.
func versionLess(a, b string) bool {
	return version.CompareKubeAwareVersionStrings(a, b) < 0
}
