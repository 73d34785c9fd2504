package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
)

const gizmoCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"gizmos.example.com"},
"spec":{"group":"example.com","scope":"Namespaced",
 "names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},
 "versions":[{"name":"v1","served":true,"storage":true,
  "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}}`

func deployment(name string) string {
	return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q},
"spec":{"selector":{"matchLabels":{"app":%[1]q}},"template":{"metadata":{"labels":{"app":%[1]q}},
"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`, name)
}

// listed is a list response: its own type and its items.
type listed struct {
	Kind, APIVersion string
	Cont             string
	Items            []map[string]any
}

// listAll reads path (with query q) on a, following continue tokens.
func listAll(t *testing.T, a *servertest.API, path, q string) listed {
	t.Helper()
	var all listed
	u := path + "?" + q
	for range 50 {
		r := a.JSON("GET", u, "")
		if r.Code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", u, r.Code, servertest.Truncate(r.Body))
		}
		var l struct {
			Kind       string `json:"kind"`
			APIVersion string `json:"apiVersion"`
			Metadata   struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(r.Body, &l); err != nil {
			t.Fatalf("GET %s: %v: %s", u, err, servertest.Truncate(r.Body))
		}
		all.Kind, all.APIVersion = l.Kind, l.APIVersion
		all.Items = append(all.Items, l.Items...)
		if l.Metadata.Continue == "" {
			return all
		}
		u = path + "?continue=" + url.QueryEscape(l.Metadata.Continue)
		if q != "" && q[:6] == "limit=" {
			u += "&" + q
		}
	}
	t.Fatalf("%s?%s: the walk does not end", path, q)
	return all
}

// TestListItemsTypeMeta: lists of built-in kinds (objwatch's own
// configmaps, Kubernetes' deployments, CRDs) have items without
// apiVersion and kind, as kube-apiserver's typed lists; a custom
// resource's items keep them. The same on every way a list is served: from
// the watch cache and from etcd, whole and in pages, at any
// resourceVersion, without managedFields; objects read one by one keep
// theirs.
func TestListItemsTypeMeta(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	for i := range 5 {
		servertest.MustCode(t, "create configmap", cached.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("c%d", i), "")), http.StatusCreated)
	}
	const deploys = "/apis/apps/v1/namespaces/default/deployments"
	for i := range 3 {
		servertest.MustCode(t, "create deployment", cached.JSON("POST", deploys, deployment(fmt.Sprintf("d%d", i))), http.StatusCreated)
	}
	servertest.MustCode(t, "create CRD", cached.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", gizmoCRD), http.StatusCreated)
	const gizmos = "/apis/example.com/v1/namespaces/default/gizmos"
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		return cached.JSON("GET", gizmos, "").Code == http.StatusOK && direct.JSON("GET", gizmos, "").Code == http.StatusOK
	})
	var rv string
	for i := range 3 {
		r := cached.JSON("POST", gizmos, fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g%d"},"spec":{"kind":"nested"}}`, i))
		servertest.MustCode(t, "create gizmo", r, http.StatusCreated)
		rv = servertest.RVOf(t, r)
	}

	kinds := []struct {
		path, listKind, apiVersion, kind string
		n                                int
		bare                             bool
	}{
		{servertest.CMs, "ConfigMapList", "v1", "ConfigMap", 5, true},
		{deploys, "DeploymentList", "apps/v1", "Deployment", 3, true},
		{"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinitionList", "apiextensions.k8s.io/v1", "CustomResourceDefinition", 1, true},
		{gizmos, "GizmoList", "example.com/v1", "Gizmo", 3, false},
	}
	queries := []string{
		"",
		"limit=2",
		"resourceVersion=0",
		"resourceVersion=" + rv + "&resourceVersionMatch=Exact",
		"resourceVersion=" + rv + "&resourceVersionMatch=NotOlderThan",
		"resourceVersion=" + rv + "&limit=2",
	}
	pagesBefore := server.CachedPages(env.Server)
	for _, k := range kinds {
		for _, q := range queries {
			var lists []listed
			for _, a := range []*servertest.API{cached, direct} {
				l := listAll(t, a, k.path, q)
				if l.Kind != k.listKind || l.APIVersion != k.apiVersion {
					t.Fatalf("%s?%s: list is %s %s, want %s %s", k.path, q, l.APIVersion, l.Kind, k.apiVersion, k.listKind)
				}
				if len(l.Items) != k.n {
					t.Fatalf("%s?%s: %d items, want %d", k.path, q, len(l.Items), k.n)
				}
				for _, it := range l.Items {
					_, hasV := it["apiVersion"]
					_, hasK := it["kind"]
					md, _ := it["metadata"].(map[string]any)
					switch {
					case md["name"] == nil || md["resourceVersion"] == nil:
						t.Fatalf("%s?%s: item without its metadata: %v", k.path, q, it)
					case k.bare && (hasV || hasK):
						t.Fatalf("%s?%s: item of a built-in kind carries apiVersion or kind: %v", k.path, q, it)
					case !k.bare && (it["apiVersion"] != k.apiVersion || it["kind"] != k.kind):
						t.Fatalf("%s?%s: custom resource's item without its apiVersion and kind: %v", k.path, q, it)
					}
				}
				lists = append(lists, l)
			}
			if !reflect.DeepEqual(lists[0].Items, lists[1].Items) {
				t.Fatalf("%s?%s: the cache's items differ from etcd's:\n%v\n%v", k.path, q, lists[0].Items, lists[1].Items)
			}
		}
		// One by one, objects keep their type.
		first := listAll(t, direct, k.path, "").Items[0]
		name := first["metadata"].(map[string]any)["name"].(string)
		if o := cached.JSON("GET", k.path+"/"+name, "").Object(); o["apiVersion"] != k.apiVersion || o["kind"] != k.kind {
			t.Fatalf("GET %s/%s: %v %v, want %s %s", k.path, name, o["apiVersion"], o["kind"], k.apiVersion, k.kind)
		}
	}
	if n := server.CachedPages(env.Server) - pagesBefore; n == 0 {
		t.Fatal("no page was served from the watch cache")
	}

	// Without managedFields (the cache's items re-encoded), and as
	// PartialObjectMetadataList, whose items are PartialObjectMetadata.
	for _, a := range []*servertest.API{cached, direct} {
		r := a.Accept("GET", deploys, "application/json;drop=metadata.managedFields", "", nil)
		var l struct{ Items []map[string]any }
		if err := json.Unmarshal(r.Body, &l); err != nil || r.Code != http.StatusOK || len(l.Items) != 3 {
			t.Fatalf("list without managedFields = %d %v %s", r.Code, err, servertest.Truncate(r.Body))
		}
		for _, it := range l.Items {
			md, _ := it["metadata"].(map[string]any)
			if it["kind"] != nil || it["apiVersion"] != nil || md["managedFields"] != nil || it["spec"] == nil {
				t.Fatalf("item without managedFields: %v", it)
			}
		}
		r = a.Accept("GET", deploys, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "", nil)
		if err := json.Unmarshal(r.Body, &l); err != nil || r.Code != http.StatusOK || len(l.Items) != 3 {
			t.Fatalf("list as PartialObjectMetadataList = %d %v %s", r.Code, err, servertest.Truncate(r.Body))
		}
		if it := l.Items[0]; it["kind"] != "PartialObjectMetadata" || it["apiVersion"] != "meta.k8s.io/v1" {
			t.Fatalf("PartialObjectMetadataList item: %v", it)
		}
	}
}
