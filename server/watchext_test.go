package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// extResource is a resource the watch-extension tests write: a mask
// pointer, and writes that change the masked value or something else.
type extResource struct {
	name, path, mask string
	create           func(name string) string
	masked, other    func(v int) string // merge patches
}

var extResources = []extResource{
	{
		name: "configmaps", path: servertest.CMs, mask: "/data/a",
		create: func(n string) string { return servertest.CM(n, "") },
		masked: func(v int) string { return fmt.Sprintf(`{"data":{"a":"%d"}}`, v) },
		other: func(v int) string {
			return fmt.Sprintf(`{"data":{"b":"%d"},"metadata":{"annotations":{"o":"%d"}}}`, v, v)
		},
	},
	{
		name: "deployments", path: "/apis/apps/v1/namespaces/default/deployments", mask: "/spec/replicas",
		create: func(n string) string {
			return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`, n)
		},
		masked: func(v int) string { return fmt.Sprintf(`{"spec":{"replicas":%d}}`, v) },
		other: func(v int) string {
			return fmt.Sprintf(`{"metadata":{"annotations":{"o":"%d"}},"spec":{"minReadySeconds":%d}}`, v, v)
		},
	},
	{
		name: "gizmos", path: servertest.Gizmos, mask: "/spec/replicas",
		create: func(n string) string {
			return fmt.Sprintf(`{"apiVersion":"scale.objwatch.io/v1","kind":"Gizmo","metadata":{"name":%q},"spec":{"replicas":1}}`, n)
		},
		masked: func(v int) string { return fmt.Sprintf(`{"spec":{"replicas":%d}}`, v) },
		other:  func(v int) string { return fmt.Sprintf(`{"metadata":{"labels":{"o":"%d"}}}`, v) },
	},
}

// extModes are the watches compared: each one's query beyond the watch's.
var extModes = []struct{ name, query string }{
	{"full", ""},
	{"mask", "fieldMask=MASK"},
	{"projection", "fieldMask=MASK&projection=mask"},
	{"deltas", "watchDeltas=true"},
	{"mask+deltas", "fieldMask=MASK&watchDeltas=true"},
	{"projection+deltas", "fieldMask=MASK&projection=mask&watchDeltas=true"},
}

// extEvent is one event as a client reconstructs it: a delta event's
// object is the patch applied to the client's last copy.
type extEvent struct {
	typ  string
	obj  map[string]any
	rv   string
	raw  string
	diff bool // it came as a patch
}

// extStream reads a watch and rebuilds its objects, keeping the client's
// copies (by name) across resumptions.
type extStream struct {
	t      *testing.T
	copies map[string][]byte
	rvs    []string // every resourceVersion the stream gave, bookmarks too
}

func (s *extStream) read(ctx context.Context, a *servertest.API, url string, until func(extEvent) bool) []extEvent {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Host+url, nil)
	resp, err := a.C.Do(req)
	if err != nil {
		s.t.Fatalf("watch %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("watch %s: %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var out []extEvent
	for sc.Scan() {
		var f struct {
			Type   string
			Object json.RawMessage
			Patch  json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			s.t.Fatalf("watch %s: bad frame %s", url, sc.Bytes())
		}
		var o map[string]any
		json.Unmarshal(f.Object, &o)
		md, _ := o["metadata"].(map[string]any)
		rv, _ := md["resourceVersion"].(string)
		s.rvs = append(s.rvs, rv)
		if f.Type == "BOOKMARK" {
			continue
		}
		if strings.Contains(sc.Text(), `"commitTime":"0001-`) {
			s.t.Errorf("watch %s: a zero commitTime: %s", url, sc.Bytes())
		}
		if f.Type == "ERROR" {
			s.t.Fatalf("watch %s: %s", url, sc.Bytes())
		}
		name, _ := md["name"].(string)
		e := extEvent{typ: f.Type, rv: rv, raw: sc.Text()}
		objJSON := []byte(f.Object)
		if f.Patch != nil {
			e.diff = true
			if f.Type != "MODIFIED" {
				s.t.Errorf("watch %s: a %s with a patch: %s", url, f.Type, sc.Bytes())
			}
			base, ok := s.copies[name]
			if !ok {
				s.t.Fatalf("watch %s: a patch for %s, of which the client has no copy: %s", url, name, sc.Bytes())
			}
			p, err := jsonpatch.DecodePatch(f.Patch)
			if err != nil {
				s.t.Fatalf("watch %s: bad patch %s", url, f.Patch)
			}
			if objJSON, err = p.Apply(base); err != nil {
				s.t.Fatalf("watch %s: patch %s does not apply to %s: %v", url, f.Patch, base, err)
			}
		}
		json.Unmarshal(objJSON, &e.obj)
		if f.Type == "DELETED" {
			delete(s.copies, name)
		} else {
			s.copies[name] = objJSON
		}
		out = append(out, e)
		if until(e) {
			return out
		}
	}
	s.t.Fatalf("watch %s ended: %v", url, sc.Err())
	return nil
}

// expected is what a watch with mask (nil: none) and projection sends,
// derived from the full watch's events.
func expected(full []extEvent, mask *fieldmask.Mask, project bool) []extEvent {
	last := map[string]map[string]any{}
	var out []extEvent
	for _, e := range full {
		name := e.obj["metadata"].(map[string]any)["name"].(string)
		prev := last[name]
		last[name] = e.obj
		if e.typ == "MODIFIED" && mask != nil && !mask.Changed(prev, e.obj) {
			continue
		}
		if project {
			e.obj = mask.Project(e.obj)
		}
		out = append(out, e)
	}
	return out
}

func sameEvents(t *testing.T, what string, got, want []extEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, _ := json.Marshal(got[i].obj)
		w, _ := json.Marshal(want[i].obj)
		if got[i].typ != want[i].typ || string(g) != string(w) {
			t.Errorf("%s: event %d:\n got %s %s (%s)\nwant %s %s", what, i, got[i].typ, g, got[i].raw, want[i].typ, w)
			return
		}
	}
}

// TestWatchExtensions: masked, projected and delta watches of a built-in
// kind of objwatch's own, one of Kubernetes' and a custom resource, from
// the watch cache and from etcd, against a full watch of the same writes:
// a masked watch gets exactly the full watch's events but the MODIFIED that
// change no masked value, a projection their projections, and a delta
// watch's patches, applied to the client's copies, give what the same
// watch without deltas sends. Each is resumed from every resourceVersion
// it gave and gets exactly the events after it.
func TestWatchExtensions(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("noCache=%v", noCache), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithBookmarkInterval(100*time.Millisecond),
				testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = noCache }))
			a := servertest.NewAPI(t, env)
			for _, c := range []string{servertest.NoScaleCRD} {
				servertest.MustCode(t, "CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", c), http.StatusCreated)
			}
			servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.JSON("GET", servertest.Gizmos, "").Code == http.StatusOK })
			for _, r := range extResources {
				t.Run(r.name, func(t *testing.T) { testWatchExtensions(t, a, r) })
			}
		})
	}
}

func testWatchExtensions(t *testing.T, a *servertest.API, r extResource) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	mask, err := fieldmask.Parse(r.mask)
	if err != nil {
		t.Fatal(err)
	}
	write := func(method, name, body string) {
		t.Helper()
		var resp servertest.Response
		switch method {
		case "POST":
			resp = a.JSON("POST", r.path, r.create(name))
		case "PATCH":
			resp = a.Do("PATCH", r.path+"/"+name, "application/merge-patch+json", []byte(body))
		case "DELETE":
			resp = a.JSON("DELETE", r.path+"/"+name, "")
		}
		if resp.Code >= 300 {
			t.Fatalf("%s %s: %d %s", method, name, resp.Code, resp.Body)
		}
	}
	write("POST", "o0", "") // before the watches: an initial event
	isEnd := func(e extEvent) bool { return e.typ == "ADDED" && e.obj["metadata"].(map[string]any)["name"] == "end" }
	type run struct {
		stream *extStream
		events []extEvent
		query  string
	}
	runs := make([]run, len(extModes))
	done := make(chan int, len(extModes))
	started := make(chan struct{}, len(extModes))
	for i, m := range extModes {
		q := strings.ReplaceAll(m.query, "MASK", url.QueryEscape(r.mask))
		runs[i].query = q
		runs[i].stream = &extStream{t: t, copies: map[string][]byte{}}
		go func() {
			defer func() { done <- i }()
			u := r.path + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&" + q
			first := true
			runs[i].events = runs[i].stream.read(ctx, a, u, func(e extEvent) bool {
				if first {
					first = false
					started <- struct{}{}
				}
				return isEnd(e)
			})
		}()
	}
	for range extModes {
		<-started // every watch has its initial event
	}
	write("PATCH", "o0", r.other(1))
	write("PATCH", "o0", r.masked(2))
	write("POST", "o1", "")
	write("PATCH", "o1", r.other(1))
	write("PATCH", "o1", r.other(2))
	write("PATCH", "o1", r.masked(5))
	time.Sleep(300 * time.Millisecond) // a bookmark or two between writes
	write("PATCH", "o0", r.other(3))
	write("PATCH", "o0", r.masked(4))
	write("DELETE", "o1", "")
	write("POST", "end", "")
	for range extModes {
		<-done
	}
	if t.Failed() {
		return
	}
	full := runs[0].events
	if n := len(full); n != 11 {
		t.Fatalf("full watch: %d events, want 11", n)
	}
	for i, m := range extModes[1:] {
		got := runs[i+1]
		var mk *fieldmask.Mask
		if strings.Contains(m.query, "fieldMask") {
			mk = &mask
		}
		want := expected(full, mk, strings.Contains(m.query, "projection"))
		sameEvents(t, m.name, got.events, want)
		patches := 0
		for _, e := range got.events {
			if e.diff {
				patches++
			}
		}
		if strings.Contains(m.query, "watchDeltas") && patches == 0 {
			t.Errorf("%s: no event carried a patch", m.name)
		}
		t.Logf("%s: %d events, %d patches, %d resourceVersions", m.name, len(got.events), patches, len(got.stream.rvs))
		if mk == nil {
			continue
		}
		// Resume from every resourceVersion the stream gave.
		seen, resumes := map[string]bool{}, 0
		defer func() { t.Logf("%s: resumed from %d resourceVersions", m.name, resumes) }()
		for _, rv := range got.stream.rvs {
			if rv == "" || seen[rv] {
				continue
			}
			seen[rv] = true
			var after []extEvent
			for _, e := range want {
				if rvAfter(e.rv, rv) {
					after = append(after, e)
				}
			}
			if len(after) == 0 {
				continue
			}
			// The client's copies as of rv: those of the stream so far.
			resumes++
			resumed := &extStream{t: t, copies: copiesAt(got.events, rv)}
			u := r.path + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv + "&" + got.query
			sameEvents(t, fmt.Sprintf("%s resumed from %s", m.name, rv), resumed.read(ctx, a, u, isEnd), after)
		}
	}
}

// rvAfter reports whether resourceVersion a is after b.
func rvAfter(a, b string) bool {
	var x, y int64
	fmt.Sscan(a, &x)
	fmt.Sscan(b, &y)
	return x > y
}

// copiesAt is a client's copies after the events of a stream up to rv.
func copiesAt(events []extEvent, rv string) map[string][]byte {
	c := map[string][]byte{}
	for _, e := range events {
		if rvAfter(e.rv, rv) {
			break
		}
		name := e.obj["metadata"].(map[string]any)["name"].(string)
		if e.typ == "DELETED" {
			delete(c, name)
			continue
		}
		c[name], _ = json.Marshal(e.obj)
	}
	return c
}

// TestWatchExtensionsBadInput: malformed or misplaced extensions are 400
// with a Status naming the parameter; a server without them ignores them.
func TestWatchExtensionsBadInput(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("x", "")), http.StatusCreated)
	long := "/" + strings.Repeat("a", fieldmask.MaxPointerLength)
	many := strings.TrimSuffix(strings.Repeat("/a,", fieldmask.MaxPointers+1), ",")
	w := servertest.CMs + "?watch=1&"
	for _, c := range []struct{ method, path, param string }{
		{"GET", w + "fieldMask=spec", "fieldMask"},
		{"GET", w + "fieldMask=", "fieldMask"},
		{"GET", w + "fieldMask=/a~2", "fieldMask"},
		{"GET", w + "fieldMask=" + long, "fieldMask"},
		{"GET", w + "fieldMask=" + many, "fieldMask"},
		{"GET", w + "projection=mask", "projection"},
		{"GET", w + "fieldMask=/a&projection=all", "projection"},
		{"GET", w + "watchDeltas=maybe", "watchDeltas"},
		{"GET", servertest.CMs + "?fieldMask=/data", "fieldMask"},
		{"GET", servertest.CMs + "?watchDeltas=true", "watchDeltas"},
		{"GET", servertest.CMs + "/x?fieldMask=/data&projection=mask", "projection"},
		{"DELETE", servertest.CMs + "?fieldMask=/data", "fieldMask"},
		{"POST", servertest.CMs + "?watchDeltas=true", "watchDeltas"},
	} {
		var body []byte
		if c.method == "POST" {
			body = []byte(servertest.CM("y", ""))
		}
		r := a.Do(c.method, c.path, "application/json", body)
		st := r.Status()
		if r.Code != http.StatusBadRequest || st.Reason != "BadRequest" || !strings.HasPrefix(st.Message, c.param+":") {
			t.Errorf("%s %s = %d %s, want 400 naming %s", c.method, servertest.Truncate([]byte(c.path)), r.Code, servertest.Truncate(r.Body), c.param)
		}
	}
	// A Table cannot be projected.
	r := a.Accept("GET", servertest.CMs+"?fieldMask=/data&projection=mask", "application/json;as=Table;v=v1;g=meta.k8s.io", "", nil)
	if r.Code != http.StatusBadRequest {
		t.Errorf("projected Table = %d %s, want 400", r.Code, r.Body)
	}
	// Nothing was written by the refused create.
	servertest.MustCode(t, "get y", a.JSON("GET", servertest.CMs+"/y", ""), http.StatusNotFound)

	// A server without the extensions does not list them and ignores them.
	plain := servertest.NewAPI(t, testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.WithoutWatchExtensions = true })))
	if v := a.JSON("GET", "/version", "").Object(); v["watchExtensions"] != "fieldMask,projection,watchDeltas" {
		t.Errorf("/version = %v, want watchExtensions", v)
	}
	if v := plain.JSON("GET", "/version", "").Object(); v["watchExtensions"] != nil {
		t.Errorf("/version without extensions = %v", v)
	}
	servertest.MustCode(t, "list ignoring a bad mask", plain.JSON("GET", servertest.CMs+"?fieldMask=bad", ""), http.StatusOK)
}

// TestWatchExtensionsSelectorsListsAndRBAC: an object entering and
// leaving a label selector is ADDED and DELETED on a masked watch whatever
// the mask; a projected list trims its items, from the cache and from
// etcd; a mask shows nothing the watch itself would not (RBAC).
func TestWatchExtensionsSelectorsListsAndRBAC(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("s", "")), http.StatusCreated)
	got := make(chan []extEvent, 1)
	started := make(chan struct{})
	go func() {
		s := &extStream{t: t, copies: map[string][]byte{}}
		u := servertest.CMs + "?watch=1&resourceVersion=" + servertest.RVOf(t, a.JSON("GET", servertest.CMs+"/s", "")) +
			"&labelSelector=in%3Dyes&fieldMask=/data/a&projection=mask&watchDeltas=true"
		close(started)
		got <- s.read(ctx, a, u, func(e extEvent) bool { return e.obj["metadata"].(map[string]any)["name"] == "end" })
	}()
	<-started
	time.Sleep(200 * time.Millisecond)
	for _, p := range []string{
		`{"metadata":{"labels":{"in":"yes"}}}`, // enters: ADDED
		`{"data":{"k":"2"}}`,                   // masked out
		`{"data":{"a":"1"}}`,                   // MODIFIED, as a patch
		`{"metadata":{"labels":{"in":"no"}}}`,  // leaves: DELETED
	} {
		servertest.MustCode(t, p, a.Do("PATCH", servertest.CMs+"/s", "application/merge-patch+json", []byte(p)), http.StatusOK)
	}
	servertest.MustCode(t, "end", a.JSON("POST", servertest.CMs, servertest.CM("end", `,"labels":{"in":"yes"}`)), http.StatusCreated)
	var types []string
	for _, e := range <-got {
		types = append(types, e.typ)
		if e.typ == "MODIFIED" && (!e.diff || e.obj["data"].(map[string]any)["a"] != "1") {
			t.Errorf("MODIFIED %s, want a patch setting data.a", e.raw)
		}
	}
	if want := "ADDED MODIFIED DELETED ADDED"; strings.Join(types, " ") != want {
		t.Errorf("events %v, want %s", types, want)
	}

	// Lists: from the cache (resourceVersion=0) and from etcd (none).
	for _, q := range []string{"?resourceVersion=0&", "?"} {
		l := a.JSON("GET", servertest.CMs+q+"fieldMask=/data/k&projection=mask", "").Object()
		items, _ := l["items"].([]any)
		if len(items) != 2 {
			t.Fatalf("projected list %s: %v", q, l)
		}
		for _, it := range items {
			o := it.(map[string]any)
			md := o["metadata"].(map[string]any)
			if o["data"].(map[string]any)["k"] == nil || md["managedFields"] != nil || md["labels"] != nil || md["uid"] == nil || md["resourceVersion"] == nil {
				t.Errorf("projected list item %v", o)
			}
		}
	}

	// RBAC: a user without access to configmaps is refused a masked watch
	// as a plain one.
	u := servertest.UserAPI(t, env, "nobody")
	for _, q := range []string{"", "&fieldMask=/data&projection=mask&watchDeltas=true"} {
		r := u.JSON("GET", servertest.CMs+"?watch=1&timeoutSeconds=1"+q, "")
		if r.Code != http.StatusForbidden {
			t.Errorf("watch as nobody%s = %d, want 403", q, r.Code)
		}
	}
}

// TestWatchExtensionsShareFrames: watches with the same extensions share
// each event's frame, made once by the watch cache (encode once, as for
// full watches): ten watches in two groups of options make two frames per
// write, not ten.
func TestWatchExtensionsShareFrames(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	created := a.JSON("POST", servertest.CMs, servertest.CM("shared", ""))
	rv := servertest.RVOf(t, created)
	const writes, perGroup = 10, 5
	before := server.ShapedFramesEncoded(env.Server)
	done := make(chan int, 2*perGroup)
	for _, q := range []string{"fieldMask=/data&projection=mask&watchDeltas=true", "watchDeltas=true"} {
		for range perGroup {
			go func() {
				s := &extStream{t: t, copies: map[string][]byte{"shared": created.Body}}
				n := 0
				s.read(ctx, a, servertest.CMs+"?watch=1&resourceVersion="+rv+"&"+q, func(e extEvent) bool {
					if e.diff {
						n++
					}
					return e.obj["data"].(map[string]any)["k"] == fmt.Sprint(writes)
				})
				done <- n
			}()
		}
	}
	for i := 1; i <= writes; i++ {
		p := fmt.Sprintf(`{"data":{"k":"%d"}}`, i)
		servertest.MustCode(t, p, a.Do("PATCH", servertest.CMs+"/shared", "application/merge-patch+json", []byte(p)), http.StatusOK)
	}
	for range 2 * perGroup {
		if n := <-done; n != writes {
			t.Errorf("a watch got %d patches, want %d", n, writes)
		}
	}
	if made := server.ShapedFramesEncoded(env.Server) - before; made != 2*writes {
		t.Errorf("%d frames made for %d writes to two groups of %d watches, want %d", made, writes, perGroup, 2*writes)
	}
}
