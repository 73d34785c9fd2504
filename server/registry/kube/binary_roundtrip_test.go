package kube_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/watch"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/objwatch/objwatch/testenv"
)

// The three encodings the round trip speaks.
const (
	jsonType     = "application/json"
	protobufType = "application/vnd.kubernetes.protobuf"
	cborType     = "application/cbor"
)

// roundTripLabel is the label the watch step patches in.
const roundTripLabel = "binary-roundtrip"

// TestBinaryRoundTripEveryKind creates, reads, lists and watches every
// served built-in kind in JSON, protobuf and CBOR through client-go: REST
// clients (rest.RESTClientFor) whose negotiated serializer is client-go's
// scheme (k8s.io/client-go/kubernetes/scheme) with apimachinery's CBOR
// serializer added, one client per encoding, each sending and accepting
// only its own media type (wireCheck fails the test for any request or
// answer in another). For every kind (the parity cases and
// extraBinaryCases), in one namespace of one server:
//
//   - the valid object is created from its JSON body and read back as
//     JSON, protobuf and CBOR; the three typed decodes must be
//     semantically equal (apiequality.Semantic: nil and empty collections,
//     and equal quantities of different forms, are equal; nothing else is
//     normalised);
//   - that typed object, with name, uid, resourceVersion,
//     creationTimestamp, generation and managedFields cleared (and what
//     the server generates from the name or uid, quirks), is encoded by
//     client-go and created again from a protobuf body ("-pb") and from a
//     CBOR body ("-cbor"); each must be created (201), and its JSON read
//     equal the first object's but for those fields and the times the
//     server sets;
//   - the collection, listed as JSON, protobuf and CBOR, decodes to the
//     kind's typed List; the three lists are semantically equal and hold
//     the three objects, the first equal to its single read;
//   - a watch in protobuf (;stream=watch) and one in CBOR
//     (application/cbor-seq) of the first object, from its
//     resourceVersion, both deliver the label patch as MODIFIED, equal to
//     the patch's JSON answer, and then the delete as DELETED (any events
//     between being MODIFIED), each decoded to the kind's Go type, equal
//     to the event before but for what deleting changes (deletedAs), and
//     the same in both watches.
//
// Every resource discovery lists with the verbs used here (create, get,
// list, watch, patch, delete) must be a case or in binarySkips, which
// gives why it is not: only the custom resource definitions
// (apiextensions.k8s.io is not in client-go's scheme). The create-only
// reviews (tokenreviews, subjectaccessreviews and the like: nothing is
// stored, nothing to read back or watch) are not listed with those verbs
// and so take no part.
//
// The test sets client-go's process-wide ClientsAllowCBOR feature gate
// for its run, so it must not run in parallel with other tests.
func TestBinaryRoundTripEveryKind(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		featuregate.Feature(clientfeatures.ClientsAllowCBOR): true,
	})
	env := testenv.Start(t)
	cfg := env.Config.RESTConfig()
	c := newCodecClients(t, cfg, schema.GroupVersion{Version: "v1"})
	for _, s := range []struct{ path, body string }{
		{"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + parityNS + `"}}`},
		{nsPath("/api/v1", "serviceaccounts"), `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`},
	} {
		if err := post(t, c.json, s.path, jsonType, []byte(s.body)); err != nil {
			t.Fatalf("setup POST %s: %v", s.path, err)
		}
	}
	all := append(append([]kindCase{}, cases...), extraBinaryCases...)
	checkEveryKindCovered(t, env.Config.RESTConfig(), all)
	for _, kc := range all {
		t.Run(kc.name, func(t *testing.T) { binaryRoundTrip(t, cfg, kc) })
	}
}

// binarySkips are the resources discovery lists with create and get that
// the round trip leaves out, with why.
var binarySkips = map[string]string{
	"apiextensions.k8s.io/v1/customresourcedefinitions": "apiextensions.k8s.io is not in client-go's scheme (k8s.io/api has no CustomResourceDefinition)",
}

// checkEveryKindCovered fails the test for each resource that discovery
// lists with create and get and that neither a case nor binarySkips names.
func checkEveryKindCovered(t *testing.T, cfg *rest.Config, all []kindCase) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, kc := range all {
		covered[resourceOf(kc.coll)] = true
	}
	served := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !hasVerbs(r.Verbs, "create", "get", "list", "watch", "patch", "delete") {
				continue
			}
			key := l.GroupVersion + "/" + r.Name
			if !strings.Contains(l.GroupVersion, "/") {
				key = "core/" + key
			}
			served[key] = true
			if !covered[key] && binarySkips[key] == "" {
				t.Errorf("%s (%s) is served but has no binary round trip case", key, r.Kind)
			}
		}
	}
	for _, kc := range all {
		if !served[resourceOf(kc.coll)] {
			t.Errorf("case %s: discovery lists no %s with every verb the round trip uses", kc.name, resourceOf(kc.coll))
		}
	}
}

// resourceOf is the group/version/resource of a collection path
// ("core/v1/pods" for /api/v1/namespaces/x/pods).
func resourceOf(coll string) string {
	p := strings.Split(strings.Trim(coll, "/"), "/")
	var gv []string
	if p[0] == "api" {
		gv, p = []string{"core", p[1]}, p[2:]
	} else {
		gv, p = p[1:3], p[3:]
	}
	return strings.Join(gv, "/") + "/" + p[len(p)-1]
}

func hasVerbs(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// codecClients are client-go REST clients, one per encoding.
type codecClients struct {
	json, protobuf, cbor *rest.RESTClient
}

// newCodecClients makes the clients of objects of gv; at the end of the
// test, each request must have been sent and answered in its client's
// media type (wireCheck).
func newCodecClients(t *testing.T, base *rest.Config, gv schema.GroupVersion) *codecClients {
	t.Helper()
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))
	client := func(mediaType string) *rest.RESTClient {
		cfg := rest.CopyConfig(base)
		wc := &wireCheck{mediaType: mediaType}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			wc.rt = rt
			return wc
		})
		t.Cleanup(func() { wc.report(t) })
		// The group version objects are encoded as (client-go sets
		// apiVersion from it).
		cfg.GroupVersion = &gv
		cfg.APIPath = "/"
		cfg.NegotiatedSerializer = codecs.WithoutConversion()
		cfg.ContentType = mediaType
		cfg.AcceptContentTypes = mediaType
		cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
		c, err := rest.RESTClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return &codecClients{json: client(jsonType), protobuf: client(protobufType), cbor: client(cborType)}
}

// wireCheck wraps a client's transport: it records each request whose
// body, or answer, is not in the client's media type (a watch's answer:
// protobuf with stream=watch, or application/cbor-seq), so that a server
// answering in another encoding the client also decodes does not pass
// unseen. It is safe for concurrent use.
type wireCheck struct {
	rt        http.RoundTripper
	mediaType string

	mu  sync.Mutex
	bad []string
}

func (w *wireCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	var bad []string
	if ct := req.Header.Get("Content-Type"); req.Body != nil && req.Method == http.MethodPost && ct != w.mediaType {
		bad = append(bad, fmt.Sprintf("%s %s sent as %q", req.Method, req.URL.Path, ct))
	}
	resp, err := w.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	want, stream := w.mediaType, ""
	if req.URL.Query().Get("watch") == "true" {
		switch w.mediaType {
		case protobufType:
			stream = "watch"
		case cborType:
			want = "application/cbor-seq"
		}
	}
	got := resp.Header.Get("Content-Type")
	if mt, params, err := mime.ParseMediaType(got); err != nil || mt != want || params["stream"] != stream {
		bad = append(bad, fmt.Sprintf("%s %s?%s answered %d in %q, want %s (stream %q)", req.Method, req.URL.Path, req.URL.RawQuery, resp.StatusCode, got, want, stream))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bad = append(w.bad, bad...)
	return resp, nil
}

func (w *wireCheck) report(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.bad {
		t.Errorf("%s client: %s", w.mediaType, b)
	}
}

// byType is each client by the media type it speaks.
func (c *codecClients) byType() []struct {
	mediaType string
	client    *rest.RESTClient
} {
	return []struct {
		mediaType string
		client    *rest.RESTClient
	}{{jsonType, c.json}, {protobufType, c.protobuf}, {cborType, c.cbor}}
}

// post creates from a body already encoded as contentType; an answer but
// 201 is an error.
func post(t *testing.T, rc *rest.RESTClient, path, contentType string, body []byte) error {
	t.Helper()
	var code int
	err := rc.Post().AbsPath(path).SetHeader("Content-Type", contentType).Body(body).Do(t.Context()).StatusCode(&code).Error()
	if err == nil && code != http.StatusCreated {
		err = fmt.Errorf("POST %s: %d, want 201", path, code)
	}
	return err
}

// get reads path through rc, decoded by client-go to its Go type, and
// checks the answer's media type.
func get(t *testing.T, rc *rest.RESTClient, mediaType, path string) runtime.Object {
	t.Helper()
	var ct string
	res := rc.Get().AbsPath(path).Do(t.Context()).ContentType(&ct)
	obj, err := res.Get()
	if err != nil {
		t.Fatalf("GET %s as %s: %v", path, mediaType, err)
	}
	if ct != mediaType {
		t.Fatalf("GET %s as %s: answered in %q", path, mediaType, ct)
	}
	return obj
}

// semanticDiff is "" if a and b are semantically equal, else how they
// differ.
func semanticDiff(a, b any) string {
	if apiequality.Semantic.DeepEqual(a, b) {
		return ""
	}
	return diff.Diff(a, b)
}

func binaryRoundTrip(t *testing.T, cfg *rest.Config, kc kindCase) {
	var head struct{ APIVersion, Kind string }
	if err := json.Unmarshal([]byte(kc.valid), &head); err != nil {
		t.Fatal(err)
	}
	gvk := schema.FromAPIVersionAndKind(head.APIVersion, head.Kind)
	if !scheme.Scheme.Recognizes(gvk) {
		t.Fatalf("%s is not in client-go's scheme", gvk)
	}
	c := newCodecClients(t, cfg, gvk.GroupVersion())
	if err := post(t, c.json, kc.coll, jsonType, []byte(kc.valid)); err != nil {
		t.Fatalf("create from JSON: %v", err)
	}
	item := kc.coll + "/" + kc.obj
	q := quirks[kc.name]
	q.settle(t, c, item)

	// One object, read in the three encodings.
	var first runtime.Object
	for _, e := range c.byType() {
		got := get(t, e.client, e.mediaType, item)
		if gvkOf(t, got) != gvk {
			t.Fatalf("GET as %s decoded to %s, want %s", e.mediaType, gvkOf(t, got), gvk)
		}
		if first == nil {
			first = got
			continue
		}
		if d := semanticDiff(first, got); d != "" {
			t.Errorf("GET as %s differs from GET as JSON:\n%s", e.mediaType, d)
		}
	}
	firstJSON := jsonRead(t, c, item)

	// The typed object created again from protobuf and CBOR bodies.
	names := []string{kc.obj}
	for _, e := range c.byType()[1:] {
		name := copyName(kc.obj, e.mediaType)
		o := first.DeepCopyObject()
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		m.SetName(name)
		m.SetUID("")
		m.SetResourceVersion("")
		m.SetCreationTimestamp(metav1.Time{})
		m.SetGeneration(0)
		m.SetManagedFields(nil)
		if q.clear != nil {
			q.clear(o)
		}
		// client-go encodes the typed object in its content type: the
		// protobuf serializer of the scheme's codecs writes the envelope.
		var code int
		if err := e.client.Post().AbsPath(kc.coll).Body(o).Do(t.Context()).StatusCode(&code).Error(); err != nil || code != http.StatusCreated {
			t.Errorf("create from %s: %d %v", e.mediaType, code, err)
			continue
		}
		names = append(names, name)
		q.settle(t, c, kc.coll+"/"+name)
		got := jsonRead(t, c, kc.coll+"/"+name)
		if d := diffNamed("", firstJSON, got, q.paths, "from JSON", "from "+e.mediaType); len(d) > 0 {
			t.Errorf("created from %s, read as JSON, differs from the object created from JSON:\n\t%s", e.mediaType, strings.Join(d, "\n\t"))
		}
	}

	// The collection in the three encodings.
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	var firstList runtime.Object
	for _, e := range c.byType() {
		l := get(t, e.client, e.mediaType, kc.coll)
		if gvkOf(t, l) != listGVK {
			t.Fatalf("LIST as %s decoded to %s, want %s", e.mediaType, gvkOf(t, l), listGVK)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]runtime.Object{}
		for _, it := range items {
			m, err := meta.Accessor(it)
			if err != nil {
				t.Fatal(err)
			}
			byName[m.GetName()] = it
		}
		for _, n := range names {
			if byName[n] == nil {
				t.Errorf("LIST as %s: no %s among %d items", e.mediaType, n, len(items))
			}
		}
		if it := byName[kc.obj]; it != nil {
			if d := semanticDiff(withoutTypeMeta(it), withoutTypeMeta(first)); d != "" {
				t.Errorf("LIST as %s: %s differs from its GET:\n%s", e.mediaType, kc.obj, d)
			}
		}
		// The list's own resourceVersion is the store's revision when it
		// was read, which any write to any resource moves (controllers of
		// other kinds write between the three lists): not compared.
		lm, err := meta.ListAccessor(l)
		if err != nil {
			t.Fatal(err)
		}
		lm.SetResourceVersion("")
		if firstList == nil {
			firstList = l
			continue
		}
		if d := semanticDiff(firstList, l); d != "" {
			t.Errorf("LIST as %s differs from LIST as JSON:\n%s", e.mediaType, d)
		}
	}

	watchBoth(t, c, kc, first)
}

// quirk is what differs in one kind's round trip.
type quirk struct {
	// clear clears what the server generates from an object's name, uid
	// or other objects from the copies before they are created (the
	// server generates it anew)...
	clear func(runtime.Object)
	// ...and paths are those fields, not compared, with why.
	paths map[string]string
	// settled, if set, holds of an object (read as JSON) once the
	// server's own later writes to it are done.
	settled func(map[string]any) bool
}

// settle waits until the object at path is settled.
func (q quirk) settle(t *testing.T, c *codecClients, path string) {
	t.Helper()
	if q.settled == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := readMap(t, c, path)
		if q.settled(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not settled within 10s: %v", path, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quirks are the kinds' quirks, by case name.
var quirks = map[string]quirk{
	"jobs": {
		clear: func(o runtime.Object) {
			j := o.(*batchv1.Job)
			j.Spec.Selector = nil
			for _, k := range []string{"controller-uid", "job-name", batchv1.ControllerUidLabel, batchv1.JobNameLabel} {
				delete(j.Spec.Template.Labels, k)
			}
		},
		paths: map[string]string{
			"spec.selector":                 "the selector the server generates from the uid",
			"spec.template.metadata.labels": "the labels the server generates from name and uid",
		},
	},
	"services": {
		clear: func(o runtime.Object) {
			s := o.(*corev1.Service)
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
		},
		paths: map[string]string{
			"spec.clusterIP":  "allocated by the server, one per service",
			"spec.clusterIPs": "allocated by the server, one per service",
		},
	},
	"namespaces": {
		clear: func(o runtime.Object) {
			delete(o.(*corev1.Namespace).Labels, corev1.LabelMetadataName)
		},
		paths: map[string]string{
			"metadata.labels." + corev1.LabelMetadataName: "the server labels a namespace with its name",
		},
	},
	"validatingadmissionpolicies": {
		// The server type-checks a policy after writing it and records
		// that in status.
		settled: func(m map[string]any) bool {
			_, ok, _ := unstructured.NestedFieldNoCopy(m, "status", "observedGeneration")
			return ok
		},
	},
}

// gvkOf is the kind client-go's scheme gives a decoded object.
func gvkOf(t *testing.T, o runtime.Object) schema.GroupVersionKind {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(o)
	if err != nil {
		t.Fatal(err)
	}
	return gvks[0]
}

// withoutTypeMeta is o with apiVersion and kind cleared (a typed list's
// items carry none in protobuf).
func withoutTypeMeta(o runtime.Object) runtime.Object {
	o = o.DeepCopyObject()
	o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return o
}

// copyName is the name of the object created from a body in mediaType.
// IP addresses are named by their address: the copies take the next ones.
func copyName(name, mediaType string) string {
	if ip := net.ParseIP(name).To4(); ip != nil {
		ip = append(net.IP{}, ip...)
		if mediaType == protobufType {
			ip[3]++
		} else {
			ip[3] += 2
		}
		return ip.String()
	}
	if mediaType == protobufType {
		return name + "-pb"
	}
	return name + "-cbor"
}

// jsonRead reads path as JSON into a map, with what the server sets for
// each object (name, uid, resourceVersion, generation, managedFields and
// its own times) left out.
func jsonRead(t *testing.T, c *codecClients, path string) map[string]any {
	t.Helper()
	m := readMap(t, c, path)
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "name")
		delete(md, "generation")
	}
	return normalise(m)
}

// readMap reads path as JSON into a map.
func readMap(t *testing.T, c *codecClients, path string) map[string]any {
	t.Helper()
	b, err := c.json.Get().AbsPath(path).Do(t.Context()).Raw()
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return m
}

// watchBoth watches kc's object (first, as read) in protobuf and in CBOR
// from its resourceVersion, patches a label in and deletes it: both
// watches must deliver the patch as MODIFIED, equal to the patch's
// answer, and then DELETED (any events between being MODIFIED), each
// decoded to first's Go type and equal to the one before but for what
// deleting changes, the same in both watches.
func watchBoth(t *testing.T, c *codecClients, kc kindCase, first runtime.Object) {
	m, err := meta.Accessor(first)
	if err != nil {
		t.Fatal(err)
	}
	type stream struct {
		mediaType string
		w         watch.Interface
	}
	var streams []stream
	for _, e := range c.byType()[1:] {
		w, err := e.client.Get().AbsPath(kc.coll).
			Param("watch", "true").
			Param("resourceVersion", m.GetResourceVersion()).
			Param("fieldSelector", "metadata.name="+kc.obj).
			Watch(t.Context())
		if err != nil {
			t.Fatalf("watch as %s: %v", e.mediaType, err)
		}
		defer w.Stop()
		streams = append(streams, stream{e.mediaType, w})
	}
	item := kc.coll + "/" + kc.obj
	patch := `{"metadata":{"labels":{"` + roundTripLabel + `":"patched"}}}`
	patched, err := c.json.Patch("application/merge-patch+json").AbsPath(item).Body([]byte(patch)).Do(t.Context()).Get()
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	if err := c.json.Delete().AbsPath(item).Param("gracePeriodSeconds", "0").Do(t.Context()).Error(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	want := reflect.TypeOf(first)
	var seen [][]watch.Event
	for _, s := range streams {
		var evs []watch.Event
		timeout := time.After(10 * time.Second)
	read:
		for {
			select {
			case ev, ok := <-s.w.ResultChan():
				if !ok {
					t.Errorf("watch as %s ended after %d events", s.mediaType, len(evs))
					break read
				}
				if ev.Type == watch.Error {
					t.Errorf("watch as %s: error event %v", s.mediaType, ev.Object)
					break read
				}
				if reflect.TypeOf(ev.Object) != want {
					t.Errorf("watch as %s: %s event decoded to %T, want %v", s.mediaType, ev.Type, ev.Object, want)
					break read
				}
				evs = append(evs, ev)
				if ev.Type == watch.Deleted {
					break read
				}
			case <-timeout:
				t.Errorf("watch as %s: no DELETED within 10s (%d events)", s.mediaType, len(evs))
				break read
			}
		}
		s.w.Stop()
		if len(evs) == 0 {
			continue
		}
		if evs[0].Type != watch.Modified || labelOf(evs[0].Object) != "patched" {
			t.Errorf("watch as %s: first event %s with label %q, want MODIFIED with the patched label", s.mediaType, evs[0].Type, labelOf(evs[0].Object))
		} else if d := semanticDiff(withoutTypeMeta(patched), withoutTypeMeta(evs[0].Object)); d != "" {
			t.Errorf("watch as %s: the MODIFIED object differs from the patch's answer (JSON):\n%s", s.mediaType, d)
		}
		for i, ev := range evs[1:] {
			if ev.Type != watch.Modified && ev.Type != watch.Deleted {
				t.Errorf("watch as %s: %s event before DELETED", s.mediaType, ev.Type)
				continue
			}
			// Each later event's object is the one before but for
			// what the delete changes.
			if d := semanticDiff(deletedAs(evs[i].Object), deletedAs(ev.Object)); d != "" {
				t.Errorf("watch as %s: the %s object differs from the one before:\n%s", s.mediaType, ev.Type, d)
			}
		}
		seen = append(seen, evs)
	}
	if len(seen) == 2 {
		if len(seen[0]) != len(seen[1]) {
			t.Errorf("watch as protobuf saw %d events, as CBOR %d", len(seen[0]), len(seen[1]))
			return
		}
		for i := range seen[0] {
			a, b := seen[0][i], seen[1][i]
			if a.Type != b.Type {
				t.Errorf("event %d: %s in protobuf, %s in CBOR", i, a.Type, b.Type)
			}
			if d := semanticDiff(withoutTypeMeta(a.Object), withoutTypeMeta(b.Object)); d != "" {
				t.Errorf("event %d (%s) differs between protobuf and CBOR:\n%s", i, a.Type, d)
			}
		}
	}
}

// deletedAs is o without what deleting it changes: apiVersion and kind,
// resourceVersion, deletionTimestamp, deletionGracePeriodSeconds,
// finalizers and managedFields (and a namespace's status and spec
// finalizers, which its deletion changes too).
func deletedAs(o runtime.Object) runtime.Object {
	o = withoutTypeMeta(o)
	m, err := meta.Accessor(o)
	if err != nil {
		return o
	}
	m.SetResourceVersion("")
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetFinalizers(nil)
	m.SetManagedFields(nil)
	if ns, ok := o.(*corev1.Namespace); ok {
		ns.Status = corev1.NamespaceStatus{}
		ns.Spec.Finalizers = nil
	}
	return o
}

func labelOf(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return ""
	}
	return m.GetLabels()[roundTripLabel]
}

// extraBinaryCases are the built-in kinds the parity cases do not hold
// (those package registry defines, and the kinds of this package without a
// recorded kube-apiserver answer); the round trip uses their name,
// collection, object name and valid body only. The admission
// configurations match only resources nobody creates.
var extraBinaryCases = []kindCase{
	{name: "configmaps", coll: nsPath("/api/v1", "configmaps"), obj: "cm1",
		valid: obj("v1", "ConfigMap", "cm1", `"data":{"k":"v"},"binaryData":{"b":"AP8="}`)},
	{name: "secrets", coll: nsPath("/api/v1", "secrets"), obj: "sec1",
		valid: obj("v1", "Secret", "sec1", `"type":"Opaque","data":{"k":"AP8="}`)},
	{name: "services", coll: nsPath("/api/v1", "services"), obj: "svc1",
		valid: obj("v1", "Service", "svc1", `"spec":{"selector":{"app":"svc1"},"ports":[{"name":"http","port":80,"targetPort":8080}]}`)},
	{name: "serviceaccounts", coll: nsPath("/api/v1", "serviceaccounts"), obj: "sa1",
		valid: obj("v1", "ServiceAccount", "sa1", `"automountServiceAccountToken":false,"imagePullSecrets":[{"name":"s"}]`)},
	{name: "namespaces", coll: "/api/v1/namespaces", obj: "parity-ns1",
		valid: obj("v1", "Namespace", "parity-ns1", `"spec":{"finalizers":["kubernetes"]}`)},
	{name: "events", coll: nsPath("/api/v1", "events"), obj: "ev1",
		valid: obj("v1", "Event", "ev1", `"involvedObject":{"kind":"Pod","namespace":"`+parityNS+`","name":"p1"},"reason":"R","message":"m","type":"Normal","count":1,"firstTimestamp":"`+sentTime+`","lastTimestamp":"`+sentTime+`","source":{"component":"c"}`)},
	{name: "events.k8s.io events", coll: nsPath("/apis/events.k8s.io/v1", "events"), obj: "ev2",
		valid: obj("events.k8s.io/v1", "Event", "ev2", `"eventTime":"2020-01-01T00:00:00.000001Z","reportingController":"example.com/c","reportingInstance":"i","action":"A","reason":"R","type":"Normal","note":"n","regarding":{"kind":"Pod","namespace":"`+parityNS+`","name":"p1"}`)},
	{name: "leases", coll: nsPath("/apis/coordination.k8s.io/v1", "leases"), obj: "l1",
		valid: obj("coordination.k8s.io/v1", "Lease", "l1", `"spec":{"holderIdentity":"h","leaseDurationSeconds":10,"renewTime":"2020-01-01T00:00:00.000001Z"}`)},
	{name: "roles", coll: nsPath("/apis/rbac.authorization.k8s.io/v1", "roles"), obj: "r1",
		valid: obj("rbac.authorization.k8s.io/v1", "Role", "r1", `"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list"]}]`)},
	{name: "rolebindings", coll: nsPath("/apis/rbac.authorization.k8s.io/v1", "rolebindings"), obj: "rb1",
		valid: obj("rbac.authorization.k8s.io/v1", "RoleBinding", "rb1", `"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r1"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"u"}]`)},
	{name: "clusterroles", coll: "/apis/rbac.authorization.k8s.io/v1/clusterroles", obj: "parity-cr",
		valid: obj("rbac.authorization.k8s.io/v1", "ClusterRole", "parity-cr", `"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]},{"nonResourceURLs":["/healthz"],"verbs":["get"]}]`)},
	{name: "clusterrolebindings", coll: "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", obj: "parity-crb",
		valid: obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "parity-crb", `"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"parity-cr"},"subjects":[{"kind":"ServiceAccount","namespace":"`+parityNS+`","name":"sa1"}]`)},
	{name: "validatingwebhookconfigurations", coll: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", obj: "parity-vwc",
		valid: obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "parity-vwc", `"webhooks":[{"name":"v.example.com",`+webhookRest+`}]`)},
	{name: "mutatingwebhookconfigurations", coll: "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", obj: "parity-mwc",
		valid: obj("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "parity-mwc", `"webhooks":[{"name":"m.example.com",`+webhookRest+`}]`)},
	{name: "validatingadmissionpolicies", coll: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", obj: "parity-vap",
		valid: obj("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "parity-vap", `"spec":{"matchConstraints":`+nothingMatches+`,"validations":[{"expression":"true"}]}`)},
	{name: "validatingadmissionpolicybindings", coll: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", obj: "parity-vapb",
		valid: obj("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "parity-vapb", `"spec":{"policyName":"parity-vap","validationActions":["Deny"]}`)},
	{name: "mutatingadmissionpolicies", coll: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", obj: "parity-map",
		valid: obj("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", "parity-map", `"spec":{"matchConstraints":`+nothingMatches+`,"mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{metadata: Object.metadata{labels: {\"a\": \"b\"}}}"}}],"reinvocationPolicy":"Never"}`)},
	{name: "mutatingadmissionpolicybindings", coll: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings", obj: "parity-mapb",
		valid: obj("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", "parity-mapb", `"spec":{"policyName":"parity-map"}`)},
	{name: "clustertrustbundles", coll: "/apis/certificates.k8s.io/v1/clustertrustbundles", obj: "parity-ctb",
		valid: obj("certificates.k8s.io/v1", "ClusterTrustBundle", "parity-ctb", `"spec":{"trustBundle":`+jsonString(selfSignedCA())+`}`)},
	{name: "devicetaintrules", coll: "/apis/resource.k8s.io/v1/devicetaintrules", obj: "parity-dtr",
		valid: obj("resource.k8s.io/v1", "DeviceTaintRule", "parity-dtr", `"spec":{"deviceSelector":{"driver":"parity.example.com","pool":"p"},"taint":{"key":"example.com/k","value":"v","effect":"NoSchedule"}}`)},
	{name: "storageversionmigrations", coll: "/apis/storagemigration.k8s.io/v1/storageversionmigrations", obj: "parity-svm",
		valid: obj("storagemigration.k8s.io/v1", "StorageVersionMigration", "parity-svm", `"spec":{"resource":{"group":"apps","resource":"deployments"}}`)},
}

// nothingMatches are admission match constraints no request meets.
const nothingMatches = `{"resourceRules":[{"apiGroups":["example.com"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}]}`

// webhookRest is a webhook (after its name) that no request reaches.
const webhookRest = `"clientConfig":{"url":"https://example.com/hook"},"rules":[{"operations":["CREATE"],"apiGroups":["example.com"],"apiVersions":["v1"],"resources":["nothings"]}],"failurePolicy":"Ignore","sideEffects":"None","admissionReviewVersions":["v1"]`

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// selfSignedCA is the PEM of a new self-signed CA certificate.
func selfSignedCA() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "parity-ca"},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2120, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
