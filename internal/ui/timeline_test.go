package ui_test

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/internal/ui"
)

// getJSON GETs a page endpoint into v.
func (e *uiEnv) getJSON(t testing.TB, path string, q url.Values, v any) {
	t.Helper()
	resp, err := e.web.Get(e.url(path, q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var m map[string]string
		json.NewDecoder(resp.Body).Decode(&m)
		t.Fatalf("%s: %s %s", path, resp.Status, m["error"])
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func (e *uiEnv) createNamespace(t testing.TB, ns string) {
	t.Helper()
	nsObj := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}
	if err := e.rc.Post().AbsPath("/api/v1/namespaces").Body(nsObj).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
}

// TestTimelineCounts: the timeline of a namespace counts what the
// server's changes list has, by type, by resource and by user.
func TestTimelineCounts(t *testing.T) {
	e := startUI(t)
	ns := "tl"
	e.createNamespace(t, ns)
	e.createCM(t, ns, "a", map[string]any{"v": "1"})
	e.createCM(t, ns, "b", map[string]any{"v": "1"})
	e.patchCM(t, ns, "a", `{"data":{"v":"2"}}`)
	e.patchCM(t, ns, "a", `{"data":{"v":"3"}}`)
	e.patchCM(t, ns, "b", `{"data":{"v":"2"}}`)
	if err := e.cms.Delete(context.Background(), ns, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var tl ui.Timeline
	e.getJSON(t, "/api/timeline", url.Values{"namespace": {ns}, "since": {"10m"}}, &tl)
	if tl.Totals["ADDED"] != 2 || tl.Totals["MODIFIED"] != 3 || tl.Totals["DELETED"] != 1 || len(tl.Items) != 6 {
		t.Fatalf("totals = %v, %d items", tl.Totals, len(tl.Items))
	}
	sum := func(m map[string][]int) (n int) {
		for _, c := range m {
			for _, x := range c {
				n += x
			}
		}
		return n
	}
	if sum(tl.ByResource) != 6 || sum(tl.ByUser) != 6 || len(tl.ByResource["configmaps"]) != len(tl.Minutes) {
		t.Fatalf("chart counts: by resource %v, by user %v, %d minutes", tl.ByResource, tl.ByUser, len(tl.Minutes))
	}
	if tl.Items[2].Type != "MODIFIED" || len(tl.Items[2].Lines) == 0 || tl.Items[2].User == "(unknown)" {
		t.Fatalf("third item = %+v", tl.Items[2])
	}
}
