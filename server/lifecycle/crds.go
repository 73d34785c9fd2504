package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/conversion"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/registry/crd"
	"github.com/objwatch/objwatch/server/webhookclient"
	"github.com/objwatch/objwatch/storage"
)

// CRDs is the life of custom resource definitions.
type CRDs struct {
	*env
	// webhooks calls CRDs' conversion webhooks (see Lifecycle.Use).
	webhooks     *webhookclient.Client
	kindsChanged func()
	// terminating holds the names of the custom resource definitions
	// being deleted (see checkActive).
	terminating sync.Map
}

func (c *CRDs) resource() *registry.Resource {
	return c.env.resource(registry.APIExtensionsGroup, "customresourcedefinitions")
}

// Run keeps the registry in step with the stored CRDs: it lists them,
// serves each, then follows a watch; on any watch failure it lists again.
// Every server sharing an etcd runs it, so a CRD created through one server
// is served by all. ready is called after each list.
func (c *CRDs) Run(ctx context.Context, ready func()) {
	res := c.resource()
	backoff := 100 * time.Millisecond
	for {
		items, rev, err := c.listAll(ctx, res, "")
		if err == nil {
			known := map[string]*apiextensionsv1.CustomResourceDefinition{}
			for _, it := range items {
				if def, err := toCRD(it); err == nil {
					known[def.Name] = def
				}
			}
			for _, name := range c.registry.CustomNames() {
				if known[name] == nil {
					c.registry.SetCustom(name, "", nil)
				}
			}
			for _, it := range items {
				c.serve(ctx, it, known)
			}
			ready()
			err = c.follow(ctx, res, rev+1, known)
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("custom resource definitions: relisting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *CRDs) follow(ctx context.Context, res *registry.Resource, from int64, known map[string]*apiextensionsv1.CustomResourceDefinition) error {
	w, err := c.store.Watch(ctx, res.Prefix(""), from)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Type == storage.Error {
			return ev.Err
		}
		if ev.Type != storage.Put && ev.Type != storage.Delete {
			continue
		}
		obj, err := objects.FromStorage(res, ev.KV)
		if err != nil {
			c.log.Error("custom resource definition: decode", "key", ev.KV.Key, "err", err)
			continue
		}
		if ev.Type == storage.Delete {
			delete(known, obj.GetName())
			c.terminating.Delete(obj.GetName())
			c.registry.SetCustom(obj.GetName(), "", nil)
		} else {
			c.serve(ctx, obj, known)
		}
		c.objects.Caches().Prune()
	}
	return errors.New("watch ended")
}

func toCRD(obj *unstructured.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &def); err != nil {
		return nil, err
	}
	return &def, nil
}

// serve accepts a CRD's names (as Kubernetes' naming and establishing
// controllers do), records that in its status, and serves its resources
// under the accepted names. known holds every CRD, by name.
func (c *CRDs) serve(ctx context.Context, obj *unstructured.Unstructured, known map[string]*apiextensionsv1.CustomResourceDefinition) {
	def, err := toCRD(obj)
	if err != nil {
		c.log.Error("custom resource definition: convert", "name", obj.GetName(), "err", err)
		return
	}
	known[def.Name] = def
	if def.DeletionTimestamp != nil {
		c.terminating.Store(def.Name, true)
	} else {
		c.terminating.Delete(def.Name)
	}
	others := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(known))
	for _, o := range known {
		others = append(others, o)
	}
	if crd.AcceptNames(def, others) {
		// Written once the resources are served (below): a client that
		// sees Established finds them, as with kube-apiserver, whose
		// handler reads the CRD from the informer its establishing
		// controller acted on.
		defer c.writeStatus(ctx, obj, def)
	}
	if !established(def) {
		c.registry.SetCustom(def.Name, "", nil)
		return
	}
	// Status-only changes keep the served resources (and their caches).
	token := fmt.Sprintf("%s/%d/%v", def.UID, def.Generation, def.Status.AcceptedNames)
	if cur, ok := c.registry.CustomToken(def.Name); ok && cur == token {
		return
	}
	resources, err := customResources(def, c.webhooks)
	if err == nil {
		err = c.registry.SetCustom(def.Name, token, resources)
	}
	if err == nil {
		for _, r := range resources {
			c.objects.Caches().For(r)
		}
		c.kindsChanged()
	}
	if err != nil {
		c.log.Error("custom resource definition: serve", "name", def.Name, "err", err)
	}
}

func established(def *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range def.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// writeStatus stores def's status. Several servers may race to write
// it; the update is conditional on the revision obj was read at, so all but
// one are no-ops and the winner's change comes back as a watch event.
func (c *CRDs) writeStatus(ctx context.Context, obj *unstructured.Unstructured, def *apiextensionsv1.CustomResourceDefinition) {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&def.Status)
	if err != nil {
		return
	}
	out := obj.DeepCopy()
	out.Object["status"] = status
	b, err := objects.ToStorage(out)
	if err != nil {
		return
	}
	rev, err := objects.ParseRV(obj.GetResourceVersion())
	if err != nil {
		return
	}
	if _, err := c.store.Update(ctx, c.resource().Key("", def.Name), b, rev); err != nil && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) && ctx.Err() == nil {
		c.log.Warn("custom resource definition: set status", "name", def.Name, "err", err)
	}
}

// customResources builds the served resources of a CRD, one per served
// version, all stored under one prefix and sharing one converter (through
// client, for a conversion webhook).
func customResources(def *apiextensionsv1.CustomResourceDefinition, client *webhookclient.Client) ([]*registry.Resource, error) {
	d, err := crd.New(def)
	if err != nil {
		return nil, err
	}
	conv, err := conversion.For(client, def, d)
	if err != nil {
		return nil, err
	}
	names := d.Names()
	var out []*registry.Resource
	for _, v := range def.Spec.Versions {
		if !v.Served {
			continue
		}
		cv := d.Version(v.Name)
		if cv == nil {
			return nil, fmt.Errorf("version %s: not built", v.Name)
		}
		res := &registry.Resource{
			Group: def.Spec.Group, Version: v.Name,
			Plural: names.Plural, Singular: names.Singular, Kind: names.Kind, ListKind: names.ListKind,
			ShortNames: names.ShortNames, Categories: names.Categories,
			Namespaced:    def.Spec.Scope == apiextensionsv1.NamespaceScoped,
			Status:        cv.HasStatus(),
			Generation:    true,
			Custom:        true,
			StoragePrefix: registry.StoragePrefix(def.Spec.Group, names.Plural),
			Strategy:      crStrategy{def: d, version: cv},
			Versions:      conv,

			DeprecationWarning: cv.DeprecationWarning(),
			ValidFieldLabel:    cv.ValidateFieldLabel,
			ConvertToTable: func(obj runtime.Object) (*metav1.Table, error) {
				return cv.ConvertToTable(context.Background(), obj, nil)
			},
		}
		res.FieldLabels = crFieldLabels(cv)
		for _, c := range v.AdditionalPrinterColumns {
			res.Columns = append(res.Columns, registry.Column{
				Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description,
				JSONPath: c.JSONPath, Priority: c.Priority,
			})
		}
		res.OpenAPIV3, res.OpenAPIV2 = cv.OpenAPIV3, cv.OpenAPIV2
		if sc := cv.Scale(); sc != nil {
			res.Scale = &registry.ScalePaths{SpecReplicas: sc.SpecReplicasPath, StatusReplicas: sc.StatusReplicasPath, LabelSelector: sc.LabelSelectorPath}
		}
		out = append(out, res)
	}
	return out, nil
}

func crFieldLabels(v *crd.Version) func(*unstructured.Unstructured) fields.Set {
	return func(u *unstructured.Unstructured) fields.Set {
		set, err := v.Fields(u.Object)
		if err != nil {
			return nil
		}
		return set
	}
}

// crStrategy adapts a CRD version to registry.Strategy.
type crStrategy struct {
	def     *crd.Definition
	version *crd.Version
}

func (c crStrategy) Normalize(obj, old map[string]any) ([]string, error) {
	return c.def.Decode(obj, c.version.Name())
}

// Stored decodes obj in the version it is stored in: the object service
// then converts it to the version served (registry.Resource.Versions).
func (c crStrategy) Stored(obj map[string]any) error {
	return c.def.DecodeStored(obj, "")
}

func (c crStrategy) Validate(obj, old map[string]any) field.ErrorList {
	if old == nil {
		return c.version.Validate(context.Background(), obj)
	}
	return c.version.ValidateUpdate(context.Background(), obj, old)
}

var _ registry.Preparer = crStrategy{}

func (c crStrategy) PrepareForCreate(obj map[string]any) { c.version.PrepareForCreate(obj) }

func (c crStrategy) PrepareForUpdate(obj, old map[string]any, subresource string) {
	if subresource == "status" && c.version.HasStatus() {
		c.version.PrepareForStatusUpdate(obj, old)
		return
	}
	c.version.PrepareForUpdate(obj, old)
}

func (c crStrategy) ValidateStatus(obj, old map[string]any) field.ErrorList {
	if !c.version.HasStatus() {
		return c.Validate(obj, old)
	}
	return c.version.ValidateStatusUpdate(context.Background(), obj, old)
}

func isCRDResource(res *registry.Resource) bool {
	return res.Group == registry.APIExtensionsGroup && res.Plural == "customresourcedefinitions"
}

// customResourcePrefix is the key prefix of the objects of the custom
// resource definition named name (plural.group).
func customResourcePrefix(name string) (string, bool) {
	plural, group, ok := strings.Cut(name, ".")
	if !ok || plural == "" || group == "" {
		return "", false
	}
	return registry.StoragePrefix(group, plural), true
}

// checkActive refuses to create objects of a custom resource whose
// definition is being deleted, as Kubernetes does.
func (c *CRDs) checkActive(res *registry.Resource) error {
	if _, terminating := c.terminating.Load(res.Plural + "." + res.Group); !terminating {
		return nil
	}
	err := apierrors.NewMethodNotSupported(gr(res), "create")
	err.ErrStatus.Message = "create not allowed while custom resource definition is terminating"
	return err
}

// drain starts the deletion of every object of the custom
// resource definition named name (through its served resource, so that
// the objects' finalizers are waited for) and returns how many are left.
// A definition that is no longer served cannot have its objects' deletion
// waited for: they are removed at once.
func (c *CRDs) drain(ctx context.Context, name string) (int64, error) {
	prefix, ok := customResourcePrefix(name)
	if !ok {
		return 0, nil
	}
	var res *registry.Resource
	for _, r := range c.registry.Resources() {
		if r.StoragePrefix == prefix {
			res = r
			break
		}
	}
	if res == nil {
		if _, err := c.store.DeletePrefix(ctx, prefix); err != nil {
			return 0, apistatus.Storage(err, gr(c.resource()), name)
		}
		return 0, nil
	}
	items, _, err := c.listAll(ctx, res, "")
	if err != nil {
		return 0, err
	}
	if _, err := c.deleteContent(ctx, res, items); err != nil {
		return 0, err
	}
	n, err := c.store.Count(ctx, prefix)
	if err != nil {
		return 0, apistatus.Storage(err, gr(res), "")
	}
	return n, nil
}
