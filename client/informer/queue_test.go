package informer

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// note parses "add a@1", "upd a@1>2", "del a@2", "gone a@2", "resync a@2"
// (key a, uid u, resourceVersion 1...; "a@1/v" gives uid v).
func note(s string) notification[*corev1.ConfigMap] {
	f := strings.Fields(s)
	obj := func(x string) *corev1.ConfigMap {
		name, rest, _ := strings.Cut(x, "@")
		rv, uid, ok := strings.Cut(rest, "/")
		if !ok {
			uid = "u"
		}
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, UID: types.UID(uid)}}
	}
	switch f[0] {
	case "add":
		o := obj(f[1])
		return notification[*corev1.ConfigMap]{kind: kindAdd, obj: o, key: KeyOf(o)}
	case "upd", "resync":
		name, rvs, _ := strings.Cut(f[1], "@")
		from, to, _ := strings.Cut(rvs, ">")
		if f[0] == "resync" {
			to = from
		}
		n := notification[*corev1.ConfigMap]{kind: kindUpdate, old: obj(name + "@" + from), obj: obj(name + "@" + to), resync: f[0] == "resync"}
		n.key = KeyOf(n.obj)
		return n
	case "del", "gone":
		o := obj(f[1])
		return notification[*corev1.ConfigMap]{kind: kindDelete, obj: o, key: KeyOf(o), unknown: f[0] == "gone"}
	}
	panic(s)
}

func describe(n notification[*corev1.ConfigMap]) string {
	id := func(o *corev1.ConfigMap) string {
		s := o.Name + "@" + o.ResourceVersion
		if o.UID != "u" {
			s += "/" + string(o.UID)
		}
		return s
	}
	switch n.kind {
	case kindAdd:
		return "add " + id(n.obj)
	case kindUpdate:
		if n.resync {
			return "resync " + id(n.obj)
		}
		return fmt.Sprintf("upd %s>%s", id(n.old), n.obj.ResourceVersion)
	default:
		if n.unknown {
			return "gone " + id(n.obj)
		}
		return "del " + id(n.obj)
	}
}

func TestQueueMerging(t *testing.T) {
	tests := []struct {
		name  string
		bound int
		push  []string
		want  []string
	}{
		{"under bound: everything", 100,
			[]string{"add a@1", "upd a@1>2", "upd a@2>3", "del a@3"},
			[]string{"add a@1", "upd a@1>2", "upd a@2>3", "del a@3"}},
		{"add+update", 1,
			[]string{"add a@1", "upd a@1>2", "upd a@2>3"},
			[]string{"add a@3"}},
		{"update+update keeps the oldest old", 1,
			[]string{"upd a@1>2", "upd a@2>3"},
			[]string{"upd a@1>3"}},
		{"add+delete cancel out", 1,
			[]string{"add a@1", "upd a@1>2", "del a@2", "add b@5"},
			[]string{"add b@5"}},
		{"update+delete", 1,
			[]string{"upd a@1>2", "del a@3"},
			[]string{"del a@3"}},
		{"update+unknown delete", 1,
			[]string{"upd a@1>2", "gone a@2"},
			[]string{"gone a@2"}},
		{"delete then a new object", 1,
			[]string{"upd a@1>2", "del a@3", "add a@4/v", "upd a@4>5/v"},
			[]string{"del a@3", "add a@5/v"}},
		{"per-key order kept across keys", 1,
			[]string{"add a@1", "add b@2", "upd a@1>3", "upd b@2>4", "add c@5"},
			[]string{"add a@3", "add b@4", "add c@5"}},
		{"merging starts at the bound", 2,
			[]string{"add a@1", "upd a@1>2", "upd a@2>3", "add b@4", "upd b@4>5"},
			[]string{"add a@1", "upd a@1>3", "add b@5"}},
		{"resync then update", 1,
			[]string{"resync a@1", "upd a@1>2"},
			[]string{"upd a@1>2"}},
		{"resync skipped when pending", 100,
			[]string{"add a@1", "resync a@1", "resync b@2"},
			[]string{"add a@1", "resync b@2"}},
	}
	// With blobs, adds and resyncs arrive still encoded, as a compact
	// cache's replays and resyncs do, and must merge and deliver the same.
	codec := newCompactCodec[*corev1.ConfigMap]()
	decode := func(b []byte) *corev1.ConfigMap {
		obj, err := codec.decode(b)
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	for _, blobs := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/blobs=%v", tt.name, blobs), func(t *testing.T) {
				q := newQueue[*corev1.ConfigMap](tt.bound)
				q.decode = decode
				for _, p := range tt.push {
					n := note(p)
					if blobs && (n.kind == kindAdd || n.resync) {
						b, err := codec.encode(n.obj)
						if err != nil {
							t.Fatal(err)
						}
						n.blob, n.obj, n.old = b, nil, nil
					}
					q.push(n)
				}
				var got []string
				for q.stats().backlog > 0 {
					n, seq, ok := q.pop(nil, nil)
					if !ok {
						t.Fatal("pop failed")
					}
					n.materialize(decode)
					got = append(got, describe(n))
					q.handled(seq)
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("pushed %v, delivered %v, want %v", tt.push, got, tt.want)
				}
			})
		}
	}
}

func TestQueueSyncAndGrowth(t *testing.T) {
	q := newQueue[*corev1.ConfigMap](1 << 20)
	for i := range 1000 {
		q.push(note(fmt.Sprintf("add o%d@%d", i, i)))
	}
	q.markSynced()
	q.push(note("add late@1"))
	for i := range 1000 {
		if q.hasSynced() {
			t.Fatalf("hasSynced() = true after %d of 1000 deliveries", i)
		}
		n, seq, _ := q.pop(nil, nil)
		if want := fmt.Sprintf("o%d", i); n.obj.Name != want {
			t.Fatalf("pop() = %s, want %s", n.obj.Name, want)
		}
		q.handled(seq)
	}
	if !q.hasSynced() {
		t.Errorf("hasSynced() = false after the initial deliveries")
	}
	if len(q.ring) > 64 {
		t.Errorf("ring size %d after draining, want it shrunk", len(q.ring))
	}
}
