package explain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/objwatch/objwatch/client"
)

// Why writes, for the command line's `objwatch why` and the web page,
// why obj (of res) is still there: whether it is being deleted, and
// what each finalizer that holds it still waits for. It lists every
// resource the server serves to find dependents, so it reads much more
// than a get.
func Why(ctx context.Context, rc *client.REST, res client.Resource, obj *unstructured.Unstructured, now time.Time, out io.Writer) error {
	what := strings.ToLower(res.Kind) + " " + KeyOf(obj)
	finalizers := obj.GetFinalizers()
	specFinalizers, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "finalizers")
	isNamespace := res.GVR.Group == "" && res.GVR.Resource == "namespaces"
	if !isNamespace {
		specFinalizers = nil
	}
	ts := obj.GetDeletionTimestamp()
	if ts == nil {
		fmt.Fprintf(out, "%s is not being deleted.\n", what)
		if all := append(slices.Clone(finalizers), specFinalizers...); len(all) > 0 {
			fmt.Fprintf(out, "Its deletion will wait for: %s.\n", strings.Join(all, ", "))
		}
		return nil
	}
	fmt.Fprintf(out, "%s is being deleted since %s (%s ago).\n", what, ts.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(ts.Time)))
	if len(finalizers)+len(specFinalizers) == 0 {
		fmt.Fprintln(out, "No finalizer is left: the server should remove it at once.")
		return nil
	}
	fmt.Fprintln(out, "It waits for:")
	x := &explainer{rc: rc, out: out, obj: obj}
	for _, f := range finalizers {
		if err := x.finalizer(ctx, f, res); err != nil {
			return err
		}
	}
	for _, f := range specFinalizers {
		if err := x.finalizer(ctx, f, res); err != nil {
			return err
		}
	}
	return nil
}

// explainer explains one object's finalizers.
type explainer struct {
	rc  *client.REST
	out io.Writer
	obj *unstructured.Unstructured
	// deps caches the object's dependents once listed.
	deps []content
}

func (x *explainer) finalizer(ctx context.Context, f string, res client.Resource) error {
	switch f {
	case metav1.FinalizerDeleteDependents:
		deps, err := x.dependents(ctx)
		if err != nil {
			return err
		}
		var blocking []content
		for _, d := range deps {
			if blocks(d.obj, x.obj.GetUID()) {
				blocking = append(blocking, d)
			}
		}
		fmt.Fprintf(x.out, "- %s: its dependents are deleted first; %s blocking it (blockOwnerDeletion)\n", f, count(len(blocking), "dependent"))
		for _, d := range blocking {
			fmt.Fprintf(x.out, "    %s%s\n", d.name, state(d.obj))
		}
	case metav1.FinalizerOrphanDependents:
		deps, err := x.dependents(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(x.out, "- %s: the garbage collector removes its reference from its dependents; %s left\n", f, count(len(deps), "dependent"))
		for _, d := range deps {
			fmt.Fprintf(x.out, "    %s\n", d.name)
		}
	case "kubernetes":
		left, err := x.namespaceContent(ctx, x.obj.GetName())
		if err != nil {
			return err
		}
		fmt.Fprintf(x.out, "- %s (spec): the namespace's content is deleted first; %s left\n", f, count(len(left), "object"))
		for _, o := range left {
			fmt.Fprintf(x.out, "    %s%s\n", o.name, state(o.obj))
		}
	case "customresourcecleanup.apiextensions.k8s.io":
		group, _, _ := unstructured.NestedString(x.obj.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(x.obj.Object, "spec", "names", "plural")
		left, err := x.customObjects(ctx, group, plural)
		if err != nil {
			return err
		}
		fmt.Fprintf(x.out, "- %s: its objects are deleted first; %s left\n", f, count(len(left), "object"))
		for _, o := range left {
			fmt.Fprintf(x.out, "    %s%s\n", o.name, state(o.obj))
		}
	default:
		fmt.Fprintf(x.out, "- %s: held until the controller that owns this finalizer removes it\n", f)
	}
	return nil
}

// blocks reports whether d's reference to uid has blockOwnerDeletion.
func blocks(d *unstructured.Unstructured, uid types.UID) bool {
	for _, r := range d.GetOwnerReferences() {
		if r.UID == uid && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			return true
		}
	}
	return false
}

// state says what holds an object: its deletion and finalizers.
func state(o *unstructured.Unstructured) string {
	var parts []string
	if o.GetDeletionTimestamp() != nil {
		parts = append(parts, "being deleted")
	}
	if fs := o.GetFinalizers(); len(fs) > 0 {
		parts = append(parts, "finalizers "+strings.Join(fs, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// dependents lists the objects whose ownerReferences name the object: in
// its namespace, or everywhere when it is cluster-scoped.
func (x *explainer) dependents(ctx context.Context) ([]content, error) {
	if x.deps != nil {
		return x.deps, nil
	}
	x.deps = []content{}
	uid := x.obj.GetUID()
	err := EachObject(ctx, x.rc, x.obj.GetNamespace(), func(res client.Resource, o *unstructured.Unstructured) {
		if slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == uid }) {
			x.deps = append(x.deps, content{name: res.GVR.GroupResource().String() + "/" + KeyOf(o), obj: o})
		}
	})
	return x.deps, err
}

// content is an object left in a container, named for printing.
type content struct {
	name string
	obj  *unstructured.Unstructured
}

// namespaceContent lists the objects left in namespace ns.
func (x *explainer) namespaceContent(ctx context.Context, ns string) ([]content, error) {
	var left []content
	err := EachObject(ctx, x.rc, ns, func(res client.Resource, o *unstructured.Unstructured) {
		if res.Namespaced {
			left = append(left, content{name: res.GVR.GroupResource().String() + "/" + o.GetName(), obj: o})
		}
	})
	return left, err
}

// customObjects lists the objects of a custom resource.
func (x *explainer) customObjects(ctx context.Context, group, plural string) ([]content, error) {
	res, err := ResolveResource(ctx, x.rc, plural+"."+group)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil // no longer served
	}
	if err != nil {
		return nil, err
	}
	l, err := client.Unstructured(x.rc, res).List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var left []content
	for _, o := range l.Items {
		left = append(left, content{name: res.GVR.GroupResource().String() + "/" + KeyOf(o), obj: o})
	}
	return left, nil
}

// EachObject calls fn for every object of every listable resource the
// server serves (at each group's preferred version), in namespace ns when
// it is not empty (cluster-scoped resources are then skipped).
func EachObject(ctx context.Context, rc *client.REST, ns string, fn func(client.Resource, *unstructured.Unstructured)) error {
	var lists []client.Resource
	err := EachResource(ctx, rc, func(res client.Resource, verbs []string) {
		if slices.Contains(verbs, "list") && (ns == "" || res.Namespaced) {
			lists = append(lists, res)
		}
	})
	if err != nil {
		return err
	}
	for _, res := range lists {
		l, err := client.Unstructured(rc, res).List(ctx, ns, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list %s: %w", res.GVR.GroupResource(), err)
		}
		for _, o := range l.Items {
			fn(res, o)
		}
	}
	return nil
}

// EachResource calls fn for every resource the server serves (not
// subresources), at each group's preferred version, with its verbs.
func EachResource(ctx context.Context, rc *client.REST, fn func(res client.Resource, verbs []string)) error {
	gvs := []schema.GroupVersion{{Version: "v1"}}
	b, err := rc.Raw(ctx, "/apis")
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	var groups metav1.APIGroupList
	if err := json.Unmarshal(b, &groups); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	for _, g := range groups.Groups {
		gvs = append(gvs, schema.GroupVersion{Group: g.Name, Version: g.PreferredVersion.Version})
	}
	for _, gv := range gvs {
		ars, err := APIResources(ctx, rc, gv)
		if err != nil {
			return err
		}
		for _, ar := range ars {
			if !strings.Contains(ar.Name, "/") {
				fn(client.Resource{GVR: gv.WithResource(ar.Name), Namespaced: ar.Namespaced, Kind: ar.Kind}, ar.Verbs)
			}
		}
	}
	return nil
}

// APIResources is the discovery document of one group version.
func APIResources(ctx context.Context, rc *client.REST, gv schema.GroupVersion) ([]metav1.APIResource, error) {
	path := "/apis/" + gv.String()
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	b, err := rc.Raw(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("discovery %s: %w", gv, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("discovery %s: %w", gv, err)
	}
	return list.APIResources, nil
}

// ResolveResource finds the resource a command-line name means, the way
// kubectl does: a plural, singular or short name or a kind, case
// insensitive, optionally followed by .group or .version.group; the core
// group first, then the others in the server's order, each at its
// preferred version.
func ResolveResource(ctx context.Context, rc *client.REST, arg string) (client.Resource, error) {
	name, group, qualified := strings.Cut(strings.ToLower(arg), ".")
	var gvs []schema.GroupVersion
	if !qualified || group == "v1" {
		gvs = append(gvs, schema.GroupVersion{Version: "v1"})
	}
	b, err := rc.Raw(ctx, "/apis")
	if err != nil {
		return client.Resource{}, fmt.Errorf("discovery: %w", err)
	}
	var groups metav1.APIGroupList
	if err := json.Unmarshal(b, &groups); err != nil {
		return client.Resource{}, fmt.Errorf("discovery: %w", err)
	}
	for _, g := range groups.Groups {
		if !qualified {
			gvs = append(gvs, schema.GroupVersion{Group: g.Name, Version: g.PreferredVersion.Version})
			continue
		}
		if g.Name == group {
			gvs = append(gvs, schema.GroupVersion{Group: g.Name, Version: g.PreferredVersion.Version})
		}
		for _, v := range g.Versions { // deployments.v1.apps
			if v.Version+"."+g.Name == group {
				gvs = append(gvs, schema.GroupVersion{Group: g.Name, Version: v.Version})
			}
		}
	}
	for _, gv := range gvs {
		ars, err := APIResources(ctx, rc, gv)
		if err != nil {
			return client.Resource{}, err
		}
		for _, ar := range ars {
			if strings.Contains(ar.Name, "/") || (len(ar.Verbs) > 0 && !slices.Contains(ar.Verbs, "watch")) {
				continue
			}
			if ar.Name == name || ar.SingularName == name || strings.ToLower(ar.Kind) == name || slices.Contains(ar.ShortNames, name) {
				return client.Resource{GVR: gv.WithResource(ar.Name), Namespaced: ar.Namespaced, Kind: ar.Kind}, nil
			}
		}
	}
	return client.Resource{}, fmt.Errorf("resource %q: %w", arg, client.ErrNotFound)
}

// KeyOf is obj's namespace/name, or its name when it has no namespace.
func KeyOf(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}
