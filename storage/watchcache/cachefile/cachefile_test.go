package cachefile_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/storage/watchcache"
	"github.com/objwatch/objwatch/storage/watchcache/cachefile"
)

const prefix = "/registry/things/"

func objects(n int) []*watchcache.Object {
	var out []*watchcache.Object
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%3), fmt.Sprintf("obj-%04d", i)
		key := prefix + ns + "/" + name
		o := &watchcache.Object{Key: key, Namespace: ns, Name: name, Rev: int64(10 + i),
			Fields: fields.Set{"metadata.name": name, "metadata.namespace": ns},
			JSON:   fmt.Appendf(nil, `{"metadata":{"name":%q,"resourceVersion":"%d"}}`, name, 10+i)}
		if i%2 == 0 {
			o.Labels = labels.Set{"app": "x", "i": fmt.Sprint(i)}
		}
		out = append(out, o)
	}
	// A cluster-scoped object, and one whose name is not the key's end.
	out = append(out, &watchcache.Object{Key: prefix + "zz-cluster", Name: "zz-cluster", Rev: 5, JSON: []byte(`{}`)},
		&watchcache.Object{Key: prefix + "zzz/odd", Namespace: "other", Name: "name", Rev: 6, JSON: []byte(`{}`)})
	slices.SortFunc(out, func(a, b *watchcache.Object) int { return bytes.Compare([]byte(a.Key), []byte(b.Key)) })
	return out
}

func encode(t testing.TB, h cachefile.Header, objs []*watchcache.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := cachefile.Write(&b, h, slices.Values(objs))
	if err != nil || n != len(objs) {
		t.Fatalf("Write = %d, %v; want %d objects", n, err, len(objs))
	}
	return b.Bytes()
}

func read(data []byte, check func(cachefile.Header) error) (cachefile.Header, []*watchcache.Object, error) {
	var got []*watchcache.Object
	h, err := cachefile.Read(bytes.NewReader(data), int64(len(data)), check, func(o *watchcache.Object) { got = append(got, o) })
	return h, got, err
}

func anyHeader(cachefile.Header) error { return nil }

// TestRoundTrip: what Write writes, Read gives back, field for field.
func TestRoundTrip(t *testing.T) {
	want := objects(50)
	h := cachefile.Header{Prefix: prefix, Fingerprint: "fp", Rev: 100}
	gh, got, err := read(encode(t, h, want), anyHeader)
	if err != nil {
		t.Fatal(err)
	}
	if gh != h {
		t.Errorf("header = %+v, want %+v", gh, h)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects differ:\ngot  %+v\nwant %+v", got[len(got)-2:], want[len(want)-2:])
	}
}

// TestDamage: every truncation and every flipped byte of a file is an
// error (ErrDamaged, or ErrMismatch where the flip lands on the format or
// the fingerprint), never a success with other objects.
func TestDamage(t *testing.T) {
	data := encode(t, cachefile.Header{Prefix: prefix, Fingerprint: "fp", Rev: 100}, objects(5))
	for n := range len(data) {
		if _, _, err := read(data[:n], anyHeader); !errors.Is(err, cachefile.ErrDamaged) {
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrDamaged", n, len(data), err)
		}
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if _, _, err := read(bad, anyHeader); !errors.Is(err, cachefile.ErrDamaged) && !errors.Is(err, cachefile.ErrMismatch) {
			t.Fatalf("byte %d flipped: %v, want ErrDamaged", i, err)
		}
	}
	if _, _, err := read(append(bytes.Clone(data), 0), anyHeader); !errors.Is(err, cachefile.ErrDamaged) {
		t.Fatalf("a byte appended: %v, want ErrDamaged", err)
	}
}

// TestWriteRefusesDisorder: objects out of key order, outside the prefix
// or newer than the header are refused, not written.
func TestWriteRefusesDisorder(t *testing.T) {
	objs := objects(3)
	h := cachefile.Header{Prefix: prefix, Rev: 100}
	for name, bad := range map[string][]*watchcache.Object{
		"order":    {objs[1], objs[0]},
		"prefix":   {{Key: "/registry/other/x", Rev: 1}},
		"revision": {{Key: prefix + "a/b", Rev: 101}},
	} {
		if _, err := cachefile.Write(&bytes.Buffer{}, h, slices.Values(bad)); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
}

// TestFile: Save then Load through a directory; another fingerprint or
// prefix is ErrMismatch; a missing file os.ErrNotExist; Discard removes.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", cachefile.Name("", "v1", "things"))
	f := &cachefile.File{Path: path, Prefix: prefix, Fingerprint: "build 1"}
	if _, err := f.Load(func(*watchcache.Object) {}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load before Save = %v, want ErrNotExist", err)
	}
	want := objects(20)
	if n, err := f.Save(200, slices.Values(want)); err != nil || n != len(want) {
		t.Fatalf("Save = %d, %v", n, err)
	}
	var got []*watchcache.Object
	rev, err := f.Load(func(o *watchcache.Object) { got = append(got, o) })
	if err != nil || rev != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("Load = %d objects at %d, %v; want %d at 200", len(got), rev, err, len(want))
	}
	for _, other := range []*cachefile.File{{Path: path, Prefix: prefix, Fingerprint: "build 2"}, {Path: path, Prefix: "/registry/other/", Fingerprint: "build 1"}} {
		if _, err := other.Load(func(*watchcache.Object) {}); !errors.Is(err, cachefile.ErrMismatch) {
			t.Errorf("Load with %+v = %v, want ErrMismatch", other, err)
		}
	}
	if err := f.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file after Discard: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 0 {
		t.Errorf("left in the directory: %v", entries)
	}
}

// FuzzRead: Read never panics on any input, and what it accepts writes
// back to a file that reads the same.
func FuzzRead(f *testing.F) {
	data := encode(f, cachefile.Header{Prefix: prefix, Fingerprint: "fp", Rev: 100}, objects(3))
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add(encode(f, cachefile.Header{Prefix: prefix, Rev: 1}, nil))
	f.Add([]byte("owcache\n\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, got, err := read(data, anyHeader)
		if err != nil {
			if !errors.Is(err, cachefile.ErrDamaged) && !errors.Is(err, cachefile.ErrMismatch) {
				t.Fatalf("error %v is neither ErrDamaged nor ErrMismatch", err)
			}
			return
		}
		_, again, err := read(encode(t, h, got), anyHeader)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("rewritten file reads %d objects, %v; want the %d read", len(again), err, len(got))
		}
	})
}

// BenchmarkRead: reading a file of 100,000 objects of ~1.4 KiB (the
// objects and labels as a custom resource's), per object.
func BenchmarkRead(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1400)
	var objs []*watchcache.Object
	for i := range 100000 {
		name := fmt.Sprintf("scale-%07d", i)
		objs = append(objs, &watchcache.Object{Key: prefix + "default/" + name, Namespace: "default", Name: name, Rev: int64(i + 1),
			Labels: labels.Set{"app": "bench", "shard": fmt.Sprint("s", i%16)},
			Fields: fields.Set{"metadata.name": name, "metadata.namespace": "default"}, JSON: body})
	}
	data := encode(b, cachefile.Header{Prefix: prefix, Rev: 1 << 20}, objs)
	b.SetBytes(int64(len(data)) / int64(len(objs)))
	b.ResetTimer()
	for b.Loop() {
		n := 0
		if _, err := cachefile.Read(bytes.NewReader(data), int64(len(data)), anyHeader, func(*watchcache.Object) { n++ }); err != nil || n != len(objs) {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(objs)), "ns/object")
}
