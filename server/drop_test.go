package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const dropAccept = "application/json;drop=metadata.managedFields"

// managedFieldsCM writes a ConfigMap with three managers' entries: a
// create, an apply and an update by patch.
func managedFieldsCM(t *testing.T, a *servertest.API, name string) {
	t.Helper()
	servertest.MustCode(t, "create "+name, a.JSON("POST", servertest.CMs+"?fieldManager=creator", servertest.CM(name, `,"labels":{"created":"yes"}`)), http.StatusCreated)
	servertest.MustCode(t, "apply "+name, a.Do("PATCH", servertest.CMs+"/"+name+"?fieldManager=applier", servertest.ApplyType,
		[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+name+"\n  labels:\n    applied: \"yes\"\ndata:\n  applied: x\n")), http.StatusOK)
	servertest.MustCode(t, "patch "+name, a.Do("PATCH", servertest.CMs+"/"+name+"?fieldManager=patcher", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"patched":"yes"}},"data":{"patched":"y"}}`)), http.StatusOK)
}

// withoutManagedFields decodes an object and removes its managedFields,
// reporting whether it had any.
func withoutManagedFields(t *testing.T, b []byte) (map[string]any, bool) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", servertest.Truncate(b), err)
	}
	md, _ := m["metadata"].(map[string]any)
	_, had := md["managedFields"]
	delete(md, "managedFields")
	return m, had
}

func mustJSONEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// TestDropManagedFields: with Accept's drop=metadata.managedFields
// (KEP-5958) get, list (from the watch cache and from etcd), the answers of
// writes, Tables and PartialObjectMetadata leave managedFields out and are
// otherwise the full answers; without it they keep them.
func TestDropManagedFields(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	managedFieldsCM(t, a, "d1")
	managedFieldsCM(t, a, "d2")

	full := a.JSON("GET", servertest.CMs+"/d1", "")
	dropped := a.Accept("GET", servertest.CMs+"/d1", dropAccept, "", nil)
	servertest.MustCode(t, "get dropped", dropped, http.StatusOK)
	want, had := withoutManagedFields(t, full.Body)
	if !had {
		t.Fatalf("full get has no managedFields: %s", full.Body)
	}
	got, had := withoutManagedFields(t, dropped.Body)
	if had {
		t.Errorf("dropped get has managedFields: %s", dropped.Body)
	}
	mustJSONEqual(t, "dropped get", got, want)
	t.Logf("get: %d bytes full, %d dropped", len(full.Body), len(dropped.Body))

	// A later, '+'-separated set and another media type's clause first.
	for _, accept := range []string{
		"application/json;drop=spec.x+metadata.managedFields",
		"text/html;drop=metadata.managedFields, " + dropAccept,
		"*/*;drop=metadata.managedFields",
	} {
		r := a.Accept("GET", servertest.CMs+"/d1", accept, "", nil)
		if _, had := withoutManagedFields(t, r.Body); had || r.Code != 200 {
			t.Errorf("Accept %q: %d, managedFields kept %v", accept, r.Code, had)
		}
	}
	if r := a.Accept("GET", servertest.CMs+"/d1", "application/yaml;drop=metadata.managedFields", "", nil); r.Code != 200 || r.Header.Get("Content-Type") != "application/yaml" ||
		bytes.Contains(r.Body, []byte("managedFields")) || !bytes.Contains(r.Body, []byte("name: d1")) {
		t.Errorf("YAML without managedFields: %d %s %s", r.Code, r.Header.Get("Content-Type"), r.Body)
	}
	if r := a.Accept("GET", servertest.CMs+"/d1", "application/json;drop=spec.x", "", nil); !bytes.Contains(r.Body, []byte("managedFields")) {
		t.Errorf("drop of another field dropped managedFields")
	}

	for _, q := range []string{"", "?limit=1", "?resourceVersion=0", "?labelSelector=created%3Dyes"} {
		fullList := a.JSON("GET", servertest.CMs+q, "")
		dl := a.Accept("GET", servertest.CMs+q, dropAccept, "", nil)
		servertest.MustCode(t, "list "+q, dl, http.StatusOK)
		if bytes.Contains(dl.Body, []byte("managedFields")) {
			t.Errorf("list %q dropped: %s", q, dl.Body)
		}
		var fl, gl struct {
			Items []json.RawMessage
		}
		json.Unmarshal(fullList.Body, &fl)
		json.Unmarshal(dl.Body, &gl)
		if len(fl.Items) == 0 || len(fl.Items) != len(gl.Items) {
			t.Fatalf("list %q: %d items full, %d dropped", q, len(fl.Items), len(gl.Items))
		}
		for i := range fl.Items {
			w, _ := withoutManagedFields(t, fl.Items[i])
			g, _ := withoutManagedFields(t, gl.Items[i])
			mustJSONEqual(t, "list "+q, g, w)
		}
	}

	// Answers of writes.
	r := a.Accept("POST", servertest.CMs+"?fieldManager=m", dropAccept, "application/json", []byte(servertest.CM("d3", "")))
	servertest.MustCode(t, "create dropped", r, http.StatusCreated)
	r2 := a.Accept("PATCH", servertest.CMs+"/d3?fieldManager=m2", dropAccept, servertest.ApplyType, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d3\ndata:\n  z: z\n"))
	servertest.MustCode(t, "apply dropped", r2, http.StatusOK)
	for _, r := range []servertest.Response{r, r2} {
		if bytes.Contains(r.Body, []byte("managedFields")) || !bytes.Contains(r.Body, []byte(`"d3"`)) {
			t.Errorf("write answer: %s", r.Body)
		}
	}
	if !bytes.Contains(a.JSON("GET", servertest.CMs+"/d3", "").Body, []byte(`"manager":"m2"`)) {
		t.Errorf("the apply's managedFields were not stored")
	}

	// Conversions.
	for _, c := range []struct{ accept, path string }{
		{"application/json;as=Table;g=meta.k8s.io;v=v1;drop=metadata.managedFields", servertest.CMs},
		{"application/json;as=Table;g=meta.k8s.io;v=v1;drop=metadata.managedFields", servertest.CMs + "?includeObject=Object"},
		{"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields", servertest.CMs + "/d1"},
		{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1;drop=metadata.managedFields", servertest.CMs},
	} {
		r := a.Accept("GET", c.path, c.accept, "", nil)
		servertest.MustCode(t, c.accept, r, http.StatusOK)
		if bytes.Contains(r.Body, []byte("managedFields")) || !bytes.Contains(r.Body, []byte(`"d1"`)) {
			t.Errorf("%s %s: %s", c.accept, c.path, servertest.Truncate(r.Body))
		}
		without := strings.ReplaceAll(c.accept, ";drop=metadata.managedFields", "")
		if r := a.Accept("GET", c.path, without, "", nil); !bytes.Contains(r.Body, []byte("managedFields")) {
			t.Errorf("%s %s: no managedFields without drop", without, c.path)
		}
	}
}

// openInitialWatch opens a ConfigMap watch with its initial events and
// bookmarks, in the encoding accept asks for.
func openInitialWatch(t *testing.T, ctx context.Context, a *servertest.API, accept string) io.ReadCloser {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Host+servertest.CMs+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
	req.Header.Set("Accept", accept)
	resp, err := a.C.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %v %v", accept, err, resp)
	}
	return resp.Body
}

// watchBytes reads a watch's body until it has n events and returns them.
func watchBytes(t *testing.T, body io.Reader, n int) [][]byte {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	var out [][]byte
	for len(out) < n && sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if len(out) < n {
		t.Fatalf("watch ended after %d of %d events: %v", len(out), n, sc.Err())
	}
	return out
}

// TestWatchDropManagedFields: watches that drop managedFields get every
// event without them and otherwise as the full watches get it, whether
// the watch cache or etcd serves them; the cache encodes each event once
// for all of them (as once for the full watchers). It reports the bytes
// saved on ConfigMaps written by three managers.
func TestWatchDropManagedFields(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("noCache=%v", noCache), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = noCache }))
			a := servertest.NewAPI(t, env)
			managedFieldsCM(t, a, "w0") // before the watches: an initial event
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			open := func(accept string) io.ReadCloser { return openInitialWatch(t, ctx, a, accept) }
			fullW, d1, d2 := open("application/json"), open(dropAccept), open("text/html;drop=metadata.managedFields, "+dropAccept)
			defer fullW.Close()
			defer d1.Close()
			defer d2.Close()
			before := server.DroppedFramesEncoded(env.Server)
			const objects = 20
			for i := 1; i <= objects; i++ {
				managedFieldsCM(t, a, fmt.Sprintf("w%d", i))
			}
			servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/w1", ""), http.StatusOK)
			// Initial ADDED and its bookmark, then 3 writes per object, a delete.
			n := 2 + 3*objects + 1
			fe, e1, e2 := watchBytes(t, fullW, n), watchBytes(t, d1, n), watchBytes(t, d2, n)
			var fullBytes, dropBytes int
			for i := range fe {
				fullBytes += len(fe[i])
				dropBytes += len(e1[i])
				// From etcd, each watch stamps its own commitTime.
				if !noCache && !bytes.Equal(e1[i], e2[i]) {
					t.Errorf("event %d differs between dropping watches:\n%s\n%s", i, e1[i], e2[i])
				}
				if bytes.Contains(e1[i], []byte("managedFields")) {
					t.Errorf("event %d has managedFields: %s", i, e1[i])
				}
				var f, d struct {
					Type   string
					Object json.RawMessage
				}
				json.Unmarshal(fe[i], &f)
				json.Unmarshal(e1[i], &d)
				if f.Type != d.Type {
					t.Fatalf("event %d: type %s, want %s", i, d.Type, f.Type)
				}
				w, had := withoutManagedFields(t, f.Object)
				g, _ := withoutManagedFields(t, d.Object)
				mustJSONEqual(t, fmt.Sprintf("event %d (%s)", i, f.Type), g, w)
				if !had && f.Type != "BOOKMARK" {
					t.Errorf("full event %d has no managedFields: %s", i, fe[i])
				}
			}
			made := server.DroppedFramesEncoded(env.Server) - before
			if !noCache && (made == 0 || made > int64(n)) {
				t.Errorf("cache encoded %d dropped frames for %d events and two watches, want at most one per event", made, n)
			}
			if dropBytes >= fullBytes*3/4 {
				t.Errorf("dropping watches got %d bytes, full %d: saved too little", dropBytes, fullBytes)
			}
			t.Logf("watch of %d events: %d bytes full, %d dropped (%.0f%% saved); %d frames encoded for two dropping watches",
				n, fullBytes, dropBytes, 100*(1-float64(dropBytes)/float64(fullBytes)), made)
		})
	}
}
