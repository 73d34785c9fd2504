package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

func labelsOfObject(m map[string]any) map[string]any {
	md, _ := m["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

// TestConversionWriteAnswer: a write in a version other than the storage
// version is answered, as kube-apiserver answers it, with the stored
// object converted back to the version written: what the conversion
// webhook set on the way to storage (here a label naming the version it
// converted to) and on the way back shows in the answer, for a create, an
// update and a dry run.
func TestConversionWriteAnswer(t *testing.T) {
	env, w := startWidgets(t)
	a := newAPI(t, env)
	w.setMode("stamp")
	check := func(what string, r response, code int, replicas float64) {
		t.Helper()
		mustCode(t, what, r, code)
		got := r.object()
		if got["apiVersion"] != "example.com/v2" || specOf(got)["replicas"] != replicas || labelsOfObject(got)["converted-to"] != "v2" {
			t.Errorf("%s answered %s, want the stored object converted back to v2 (label converted-to=v2, replicas %v)", what, r.body, replicas)
		}
	}
	check("dry-run create in v2", a.json("POST", widgetsV2+"?dryRun=All", widgetV2("s", 3)), http.StatusCreated, 3)
	mustCode(t, "dry run stored nothing", a.json("GET", widgetsV1+"/s", ""), http.StatusNotFound)
	check("create in v2", a.json("POST", widgetsV2, widgetV2("s", 3)), http.StatusCreated, 3)
	if got := a.json("GET", widgetsV1+"/s", "").object(); labelsOfObject(got)["converted-to"] != "v1" || specOf(got)["size"] != "3" {
		t.Errorf("stored in v1: %v", got)
	}
	r := a.json("GET", widgetsV2+"/s", "")
	body := strings.Replace(string(r.body), `"replicas":3`, `"replicas":4`, 1)
	check("update in v2", a.json("PUT", widgetsV2+"/s", body), http.StatusOK, 4)
	// The webhook is told what to convert only for the writes' versions.
	for _, c := range w.reset() {
		if c.desired != "example.com/v1" && c.desired != "example.com/v2" {
			t.Errorf("review to %s", c.desired)
		}
	}
}

// TestConversionWebhookV1beta1: a conversion webhook that accepts only
// conversionReviewVersions [v1beta1] gets apiextensions.k8s.io/v1beta1
// ConversionReviews, and its v1beta1 answers convert.
func TestConversionWebhookV1beta1(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	w := startConvWebhook(t)
	crd := strings.Replace(widgetCRD(w.srv.URL+"/convert", w.caPEM, "v1"), `"conversionReviewVersions":["v1"]`, `"conversionReviewVersions":["v1beta1"]`, 1)
	mustCode(t, "create CRD", a.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd), http.StatusCreated)
	waitServed(t, a, widgetsV2)
	r := a.json("POST", widgetsV2, widgetV2("b", 6))
	mustCode(t, "create in v2", r, http.StatusCreated)
	if got := specOf(r.object()); got["replicas"] != float64(6) {
		t.Errorf("create answered %s", r.body)
	}
	if got := specOf(a.json("GET", widgetsV1+"/b", "").object()); got["size"] != "6" {
		t.Errorf("stored in v1: %v", got)
	}
	calls := w.reset()
	if len(calls) == 0 {
		t.Fatal("conversion webhook not called")
	}
	for _, c := range calls {
		if c.apiVersion != "apiextensions.k8s.io/v1beta1" {
			t.Errorf("review sent as %q, want apiextensions.k8s.io/v1beta1", c.apiVersion)
		}
	}
}

// TestConversionCacheListBatches: when a watch cache of a version the
// conversion webhook converts (re)lists, the stored objects are converted
// in one ConversionReview, not one per object.
func TestConversionCacheListBatches(t *testing.T) {
	env, w := startWidgets(t)
	a := newAPI(t, env)
	const n = 20
	names := make([]string, n)
	for i := range n {
		names[i] = "w" + string(rune('a'+i))
		mustCode(t, "create", a.json("POST", widgetsV1, widgetV1(names[i], "1")), http.StatusCreated)
	}
	w.reset()
	// Any change of the CRD serves new resources, whose caches list.
	r := a.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "")
	body := strings.Replace(string(r.body), `"names":{`, `"names":{"shortNames":["wd"],`, 1)
	mustCode(t, "update CRD", a.json("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", body), http.StatusOK)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var batch, single int
		for _, c := range w.reset() {
			if c.desired != "example.com/v2" {
				continue
			}
			if len(c.names) == n {
				batch++
			} else {
				single += len(c.names)
			}
		}
		if batch > 0 {
			if single > n/2 {
				t.Errorf("%d objects converted one by one besides the batch", single)
			}
			break
		}
		if single >= n {
			t.Fatalf("the cache's list converted %d objects without a batch of %d", single, n)
		}
		if time.Now().After(deadline) {
			t.Fatal("no ConversionReview of the whole list within 10 s")
		}
		// A list from the cache waits for it.
		a.json("GET", widgetsV2+"?resourceVersion=0", "")
		time.Sleep(50 * time.Millisecond)
	}
}
