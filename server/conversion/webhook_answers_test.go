package conversion_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
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
	env, w := servertest.StartWidgets(t)
	a := servertest.NewAPI(t, env)
	w.SetMode("stamp")
	check := func(what string, r servertest.Response, code int, replicas float64) {
		t.Helper()
		servertest.MustCode(t, what, r, code)
		got := r.Object()
		if got["apiVersion"] != "example.com/v2" || servertest.SpecOf(got)["replicas"] != replicas || labelsOfObject(got)["converted-to"] != "v2" {
			t.Errorf("%s answered %s, want the stored object converted back to v2 (label converted-to=v2, replicas %v)", what, r.Body, replicas)
		}
	}
	check("dry-run create in v2", a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", servertest.WidgetV2("s", 3)), http.StatusCreated, 3)
	servertest.MustCode(t, "dry run stored nothing", a.JSON("GET", servertest.WidgetsV1+"/s", ""), http.StatusNotFound)
	check("create in v2", a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("s", 3)), http.StatusCreated, 3)
	if got := a.JSON("GET", servertest.WidgetsV1+"/s", "").Object(); labelsOfObject(got)["converted-to"] != "v1" || servertest.SpecOf(got)["size"] != "3" {
		t.Errorf("stored in v1: %v", got)
	}
	r := a.JSON("GET", servertest.WidgetsV2+"/s", "")
	body := strings.Replace(string(r.Body), `"replicas":3`, `"replicas":4`, 1)
	check("update in v2", a.JSON("PUT", servertest.WidgetsV2+"/s", body), http.StatusOK, 4)
	// The webhook is told what to convert only for the writes' versions.
	for _, c := range w.Reset() {
		if c.Desired != "example.com/v1" && c.Desired != "example.com/v2" {
			t.Errorf("review to %s", c.Desired)
		}
	}
}

// TestConversionWebhookV1beta1: a conversion webhook that accepts only
// conversionReviewVersions [v1beta1] gets apiextensions.k8s.io/v1beta1
// ConversionReviews, and its v1beta1 answers convert.
func TestConversionWebhookV1beta1(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	w := servertest.StartConvWebhook(t)
	crd := strings.Replace(servertest.WidgetCRD(w.Srv.URL+"/convert", w.CaPEM, "v1"), `"conversionReviewVersions":["v1"]`, `"conversionReviewVersions":["v1beta1"]`, 1)
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd), http.StatusCreated)
	servertest.WaitServed(t, a, servertest.WidgetsV2)
	r := a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("b", 6))
	servertest.MustCode(t, "create in v2", r, http.StatusCreated)
	if got := servertest.SpecOf(r.Object()); got["replicas"] != float64(6) {
		t.Errorf("create answered %s", r.Body)
	}
	if got := servertest.SpecOf(a.JSON("GET", servertest.WidgetsV1+"/b", "").Object()); got["size"] != "6" {
		t.Errorf("stored in v1: %v", got)
	}
	calls := w.Reset()
	if len(calls) == 0 {
		t.Fatal("conversion webhook not called")
	}
	for _, c := range calls {
		if c.ApiVersion != "apiextensions.k8s.io/v1beta1" {
			t.Errorf("review sent as %q, want apiextensions.k8s.io/v1beta1", c.ApiVersion)
		}
	}
}

// TestConversionCacheListBatches: when a watch cache of a version the
// conversion webhook converts (re)lists, the stored objects are converted
// in one ConversionReview, not one per object.
func TestConversionCacheListBatches(t *testing.T) {
	env, w := servertest.StartWidgets(t)
	a := servertest.NewAPI(t, env)
	const n = 20
	names := make([]string, n)
	for i := range n {
		names[i] = "w" + string(rune('a'+i))
		servertest.MustCode(t, "create", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1(names[i], "1")), http.StatusCreated)
	}
	w.Reset()
	// Any change of the CRD serves new resources, whose caches list.
	r := a.JSON("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "")
	body := strings.Replace(string(r.Body), `"names":{`, `"names":{"shortNames":["wd"],`, 1)
	servertest.MustCode(t, "update CRD", a.JSON("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", body), http.StatusOK)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var batch, single int
		for _, c := range w.Reset() {
			if c.Desired != "example.com/v2" {
				continue
			}
			if len(c.Names) == n {
				batch++
			} else {
				single += len(c.Names)
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
		a.JSON("GET", servertest.WidgetsV2+"?resourceVersion=0", "")
		time.Sleep(50 * time.Millisecond)
	}
}
