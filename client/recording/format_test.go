package recording_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client/recording"
)

const cms = "v1/configmaps"

// fakeClock advances by step at each call.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(step); return t }
}

func cm(name, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
		Data:       data,
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{cms}, Server: "https://x"}, recording.Options{Now: fakeClock(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Object(recording.Initial, cms, cm("a", "1", nil)))
	must(t, w.Marker(recording.Synced, cms, "1"))
	must(t, w.Object(recording.Modified, cms, cm("a", "2", map[string]string{"k": "v"})))
	must(t, w.Marker(recording.Gone, cms, "2"))
	must(t, w.Marker(recording.Relist, cms, ""))
	must(t, w.Object(recording.Listed, cms, cm("b", "5", nil)))
	must(t, w.Marker(recording.Synced, cms, "5"))
	must(t, w.Close())

	rec, err := recording.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Header.Format != recording.Format || rec.Header.Version != 1 || rec.Header.Server != "https://x" {
		t.Errorf("header %+v", rec.Header)
	}
	var kinds []string
	for i, it := range rec.Items {
		kinds = append(kinds, string(it.Kind))
		if it.Line != i+2 {
			t.Errorf("item %d has line %d", i, it.Line)
		}
		if i > 0 && it.At <= rec.Items[i-1].At {
			t.Errorf("item %d at %v, not after %v", i, it.At, rec.Items[i-1].At)
		}
	}
	if got, want := strings.Join(kinds, ","), "initial,synced,MODIFIED,gone,relist,listed,synced"; got != want {
		t.Errorf("kinds %s, want %s", got, want)
	}
	var got corev1.ConfigMap
	must(t, json.Unmarshal(rec.Items[2].Object, &got))
	if got.Data["k"] != "v" || got.ResourceVersion != "2" {
		t.Errorf("object %+v", got)
	}
}

func TestSecretsAndRedaction(t *testing.T) {
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, Data: map[string][]byte{"pw": []byte("hunter2")}}
	res := []string{cms, "v1/secrets"}
	for _, include := range []bool{false, true} {
		var buf bytes.Buffer
		w, err := recording.NewWriter(&buf, recording.Header{Resources: res}, recording.Options{IncludeSecrets: include,
			Redact: []string{"/data/pw", "data.password", "/metadata/annotations/a~1b"}})
		if err != nil {
			t.Fatal(err)
		}
		must(t, w.Object(recording.Added, "v1/secrets", secret))
		c := cm("c", "1", map[string]string{"password": "p", "other": "o"})
		c.Annotations = map[string]string{"a/b": "x", "keep": "y"}
		must(t, w.Object(recording.Added, cms, c))
		must(t, w.Close())
		rec, err := recording.ReadAll(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Header.Secrets != include || len(rec.Header.Redacted) != 3 {
			t.Errorf("header %+v", rec.Header)
		}
		want := 1
		if include {
			want = 2
		}
		if len(rec.Items) != want {
			t.Fatalf("include=%v: %d items, want %d", include, len(rec.Items), want)
		}
		if include {
			var s corev1.Secret
			must(t, json.Unmarshal(rec.Items[0].Object, &s)) // still decodes
			if string(s.Data["pw"]) == "hunter2" || bytes.Contains(rec.Items[0].Object, []byte("aHVudGVyMg")) {
				t.Errorf("secret value not redacted: %s", rec.Items[0].Object)
			}
		} else if w.Skipped() != 1 {
			t.Errorf("skipped %d", w.Skipped())
		}
		var got corev1.ConfigMap
		must(t, json.Unmarshal(rec.Items[len(rec.Items)-1].Object, &got))
		if got.Data["password"] != recording.Redacted || got.Data["other"] != "o" ||
			got.Annotations["a/b"] != recording.Redacted || got.Annotations["keep"] != "y" {
			t.Errorf("redaction: %+v %+v", got.Data, got.Annotations)
		}
	}
}

func TestBadRedactPath(t *testing.T) {
	for _, p := range []string{"", "/", "a..b", "/a/~2"} {
		if _, err := recording.NewWriter(&bytes.Buffer{}, recording.Header{Resources: []string{cms}}, recording.Options{Redact: []string{p}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}

// gz compresses lines into a recording.
func gz(lines ...string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for _, l := range lines {
		zw.Write([]byte(l + "\n"))
	}
	zw.Close()
	return buf.Bytes()
}

const (
	hdr = `{"format":"objwatch-recording","version":1,"resources":["v1/configmaps"],"start":"2026-12-04T07:00:00Z","secrets":false}`
	add = `{"kind":"ADDED","at":%d,"resource":"v1/configmaps","object":{"metadata":{"name":"a"}}}`
)

func line(format string, at int) string { return strings.Replace(format, "%d", itoa(at), 1) }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestBadRecordings(t *testing.T) {
	good := gz(hdr, line(add, 5), line(add, 7), `{"kind":"end","at":9,"items":2}`)
	if _, err := recording.ReadAll(bytes.NewReader(good)); err != nil {
		t.Fatalf("good recording refused: %v", err)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"not gzip", []byte("{}\n"), "line 1: not a gzip"},
		{"empty", gz(), "line 1: truncated"},
		{"wrong format", gz(`{"format":"other","version":1,"resources":["v1/configmaps"],"start":"2026-12-04T07:00:00Z","secrets":false}`), "line 1: not an objwatch recording"},
		{"wrong version", gz(strings.Replace(hdr, `"version":1`, `"version":2`, 1)), "line 1: version 2 not supported"},
		{"no end line", gz(hdr, line(add, 5), line(add, 7)), "line 4: truncated"},
		{"cut gzip", good[:len(good)-12], "truncated"},
		{"out of order", gz(hdr, line(add, 5), line(add, 3), `{"kind":"end","at":9,"items":2}`), "line 3: out of order"},
		{"unknown kind", gz(hdr, line(add, 5), `{"kind":"EXPLODED","at":6,"resource":"v1/configmaps"}`), `line 3: unknown kind "EXPLODED"`},
		{"unknown field", gz(hdr, `{"kind":"ADDED","at":1,"resource":"v1/configmaps","obj":{}}`), "line 2: not an item"},
		{"not json", gz(hdr, line(add, 1), `{"kind":`), "line 3: not an item"},
		{"other resource", gz(hdr, `{"kind":"ADDED","at":1,"resource":"v1/secrets","object":{}}`), `line 2: resource "v1/secrets" is not one`},
		{"no object", gz(hdr, `{"kind":"ADDED","at":1,"resource":"v1/configmaps"}`), "line 2: ADDED without an object"},
		{"listed outside relist", gz(hdr, `{"kind":"listed","at":1,"resource":"v1/configmaps","object":{}}`), "line 2: listed object of v1/configmaps outside a relist"},
		{"count", gz(hdr, line(add, 1), `{"kind":"end","at":9,"items":5}`), "line 3: truncated or corrupt: the end line counts 5"},
		{"after end", gz(hdr, `{"kind":"end","at":9}`, line(add, 10)), "line 3: a line after the end line"},
	}
	for _, c := range cases {
		_, err := recording.ReadAll(bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func FuzzReadRecording(f *testing.F) {
	f.Add(gz(hdr, line(add, 5), `{"kind":"end","at":9,"items":1}`))
	f.Add(gz(hdr, `{"kind":"relist","at":1,"resource":"v1/configmaps"}`, `{"kind":"listed","at":1,"resource":"v1/configmaps","object":{"metadata":{"name":"a"}}}`, `{"kind":"synced","at":2,"resource":"v1/configmaps"}`, `{"kind":"end","at":9,"items":3}`))
	f.Add(gz(hdr))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := recording.ReadAll(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "recording: line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		// What the reader accepts, the player plays without panicking,
		// and re-writing it yields an equal recording.
		p, err := recording.NewPlayer[*corev1.ConfigMap](rec, rec.Header.Resources[0])
		if err != nil {
			t.Fatal(err)
		}
		_ = p.Run()
		var buf bytes.Buffer
		w, err := recording.NewWriter(&buf, rec.Header, recording.Options{IncludeSecrets: rec.Header.Secrets})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range rec.Items {
			must(t, w.Write(it))
		}
		must(t, w.Close())
		again, err := recording.ReadAll(&buf)
		if err != nil {
			t.Fatalf("re-written recording refused: %v", err)
		}
		if len(again.Items) != len(rec.Items) {
			t.Fatalf("re-written: %d items, want %d", len(again.Items), len(rec.Items))
		}
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
