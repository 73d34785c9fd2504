package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/storage/value"

	"github.com/objwatch/objwatch/storage"
)

// TestWriteNotes: a create, update and delete with a note store it at the
// write's revision; a write that fails its precondition stores none; a
// note is kept at rest as the written value is (encrypted for a secret,
// plain for another resource) and read back in the clear.
func TestWriteNotes(t *testing.T) {
	raw := startStore(t)
	enc := gcm(t, "k1", 1)
	s := raw.WithTransformers(func(key string) value.Transformer {
		if strings.HasPrefix(key, "/registry/secrets/") {
			return enc
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	note := func(name, v string) context.Context { return storage.WithNote(ctx, name, []byte(v)) }

	c, err := s.Create(note("n1", "created"), "/registry/secrets/ns/a", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Update(note("n2", "updated"), "/registry/secrets/ns/a", []byte("v2"), c.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(note("n3", "conflicted"), "/registry/secrets/ns/a", []byte("v3"), c.ModRevision); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("stale update: %v, want a conflict", err)
	}
	if _, err := s.Create(note("n4", "exists"), "/registry/secrets/ns/a", []byte("v4")); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	d, err := s.Delete(note("n5", "deleted"), "/registry/secrets/ns/a", u.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(note("n6", "plain"), "/registry/configmaps/ns/b", []byte("v")); err != nil {
		t.Fatal(err)
	}

	lr, err := s.List(ctx, storage.NotesPrefix, storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]storage.KeyValue{}
	for _, kv := range lr.KVs {
		got[string(kv.Value)] = kv
	}
	for v, rev := range map[string]int64{"created": c.ModRevision, "updated": u.ModRevision, "deleted": d.ModRevision} {
		kv, ok := got[v]
		if !ok {
			t.Errorf("note %q missing; notes %v", v, lr.KVs)
			continue
		}
		if kv.ModRevision != rev {
			t.Errorf("note %q at revision %d, its write at %d", v, kv.ModRevision, rev)
		}
		if w, _ := storage.NoteWrittenKey(kv.Key); w != "/registry/secrets/ns/a" {
			t.Errorf("note %q names written key %q", v, w)
		}
	}
	for _, v := range []string{"conflicted", "exists"} {
		if _, ok := got[v]; ok {
			t.Errorf("a failed write stored its note %q", v)
		}
	}
	if len(lr.KVs) != 4 {
		t.Errorf("%d notes, want 4", len(lr.KVs))
	}

	atRest, err := raw.List(ctx, storage.NotesPrefix, storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range atRest.KVs {
		secret := strings.Contains(kv.Key, "/registry/secrets/")
		if plain := !strings.HasPrefix(string(kv.Value), "k8s:enc:aesgcm:v1:k1:"); plain == secret {
			t.Errorf("note %s at rest: %q (a secret's note must be encrypted, another's plain)", kv.Key, kv.Value)
		}
	}
}
