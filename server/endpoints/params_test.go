package endpoints_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metascheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// codecListOptions is the oracle: ListOptions as apimachinery's parameter
// codec (kube-apiserver's) decodes the query.
func codecListOptions(t *testing.T, q string) internalversion.ListOptions {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	var o internalversion.ListOptions
	if err := metascheme.ParameterCodec.DecodeParameters(v, metav1.SchemeGroupVersion, &o); err != nil {
		t.Fatalf("codec: %v", err)
	}
	return o
}

// watchEvents reads a response body as watch events; ok is false when it
// is not a watch stream (a list).
func watchEvents(body []byte) (types []string, bookmarkEnd bool, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type == "" {
			return nil, false, false
		}
		types = append(types, ev.Type)
		if ev.Type == "BOOKMARK" && ev.Object.Metadata.Annotations["k8s.io/initial-events-end"] == "true" {
			bookmarkEnd = true
		}
	}
	return types, bookmarkEnd, true
}

// Boolean query parameters are read as Kubernetes reads them: everything
// but "0" and "false" (any case) is true, and the first of repeated values
// counts. The Python client sends "True".
func TestBooleanQueryParameters(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	rv := servertest.RVOf(t, a.JSON("POST", servertest.CMs, servertest.CM("a", "")))
	spellings := []string{"watch=True", "watch=TRUE", "watch=true", "watch=1", "watch=yes", "watch=",
		"watch=0", "watch=false", "watch=False", "watch=FALSE", "watch=false&watch=true", "watch=true&watch=false"}
	for _, q := range spellings {
		t.Run(q, func(t *testing.T) {
			want := codecListOptions(t, q).Watch
			r := a.JSON("GET", servertest.CMs+"?"+q+"&timeoutSeconds=1", "")
			if r.Code != 200 {
				t.Fatalf("GET ?%s = %d %s", q, r.Code, servertest.Truncate(r.Body))
			}
			_, _, isWatch := watchEvents(r.Body)
			if isWatch != want {
				t.Fatalf("GET ?%s answered a watch = %v, want %v (codec) ; body %s", q, isWatch, want, servertest.Truncate(r.Body))
			}
		})
	}
	for _, v := range []string{"True", "1", "TRUE", "False", "0"} {
		t.Run("allowWatchBookmarks="+v, func(t *testing.T) {
			q := "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=" + rv + "&timeoutSeconds=1&allowWatchBookmarks=" + v
			want := codecListOptions(t, q).AllowWatchBookmarks
			r := a.JSON("GET", servertest.CMs+"?"+q, "")
			types, end, ok := watchEvents(r.Body)
			if r.Code != 200 || !ok {
				t.Fatalf("GET ?%s = %d %s", q, r.Code, servertest.Truncate(r.Body))
			}
			if len(types) == 0 || types[0] != "ADDED" {
				t.Fatalf("GET ?%s events %v, want the initial ADDED first", q, types)
			}
			if end != want {
				t.Fatalf("GET ?%s initial-events-end bookmark = %v, want %v (codec)", q, end, want)
			}
		})
	}
	for _, v := range []string{"True", "FALSE", "0"} {
		t.Run("sendInitialEvents="+v, func(t *testing.T) {
			q := "watch=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=" + rv + "&sendInitialEvents=" + v
			o := codecListOptions(t, q)
			r := a.JSON("GET", servertest.CMs+"?"+q, "")
			types, _, ok := watchEvents(r.Body)
			if r.Code != 200 || !ok {
				t.Fatalf("GET ?%s = %d %s", q, r.Code, servertest.Truncate(r.Body))
			}
			gotInitial := len(types) > 0 && types[0] == "ADDED"
			if gotInitial != *o.SendInitialEvents {
				t.Fatalf("GET ?%s initial events = %v (%v), want %v (codec)", q, gotInitial, types, *o.SendInitialEvents)
			}
		})
	}
}

// A watch without resourceVersion gets Kubernetes' defaults (the
// WatchList feature, on since 1.34): the initial events end with the
// initial-events-end bookmark when bookmarks are allowed.
func TestWatchDefaultsEndInitialEvents(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	a.JSON("POST", servertest.CMs, servertest.CM("a", ""))
	for _, tc := range []struct {
		q   string
		end bool
	}{{"watch=1&allowWatchBookmarks=true", true}, {"watch=1&resourceVersion=0&allowWatchBookmarks=true", true}, {"watch=1", false}} {
		r := a.JSON("GET", servertest.CMs+"?timeoutSeconds=1&"+tc.q, "")
		types, end, ok := watchEvents(r.Body)
		if r.Code != 200 || !ok || len(types) == 0 || types[0] != "ADDED" {
			t.Fatalf("GET ?%s = %d %v %s", tc.q, r.Code, types, servertest.Truncate(r.Body))
		}
		if end != tc.end {
			t.Errorf("GET ?%s initial-events-end bookmark = %v, want %v", tc.q, end, tc.end)
		}
	}
}

// DELETE takes its options from the query when it has no body.
func TestDeleteOptionsFromQuery(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	a.JSON("POST", servertest.CMs, servertest.CM("a", `,"finalizers":["example.com/hold"]`))
	r := a.JSON("DELETE", servertest.CMs+"/a?propagationPolicy=Orphan&dryRun=All", "")
	servertest.MustCode(t, "dry-run delete", r, 200)
	if fs, _ := r.Object()["metadata"].(map[string]any)["finalizers"].([]any); len(fs) != 2 {
		t.Fatalf("dry-run Orphan delete finalizers = %v, want hold and orphan", fs)
	}
	got := a.JSON("GET", servertest.CMs+"/a", "").Object()["metadata"].(map[string]any)
	if _, ok := got["deletionTimestamp"]; ok {
		t.Fatalf("dryRun=All delete from the query marked the object: %v", got)
	}
}
