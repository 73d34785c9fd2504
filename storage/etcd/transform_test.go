package etcd_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/storagetest"
)

// gcm is Kubernetes' aesgcm provider with one key, as encryptionconfig
// builds it (the provider prefix, then the key name's).
func gcm(t *testing.T, name string, secret byte) value.Transformer {
	t.Helper()
	block, err := aes.NewCipher(bytes.Repeat([]byte{secret}, 32))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := aestransformer.NewGCMTransformer(block)
	if err != nil {
		t.Fatal(err)
	}
	keys := value.NewPrefixTransformers(errors.New("no matching key was found for the provided AES transformer"),
		value.PrefixTransformer{Prefix: []byte(name + ":"), Transformer: tr})
	return value.NewPrefixTransformers(nil, value.PrefixTransformer{Prefix: []byte("k8s:enc:aesgcm:v1:"), Transformer: keys})
}

func all(tr value.Transformer) storage.Transformers {
	return func(string) value.Transformer { return tr }
}

// The transformed store keeps every guarantee of the contract.
func TestConformanceEncrypted(t *testing.T) {
	raw := startStore(t)
	s := raw.WithTransformers(all(gcm(t, "k1", 1)))
	storagetest.Run(t, func(*testing.T) storage.Interface { return s })
}

func TestTransformedAtRest(t *testing.T) {
	raw := startStore(t)
	s := raw.WithTransformers(all(gcm(t, "k1", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := s.Watch(ctx, "/t/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	c, err := s.Create(ctx, "/t/a", []byte("plain-one"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Update(ctx, "/t/a", []byte("plain-two"), c.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := raw.Get(ctx, "/t/a")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored.Value, []byte("k8s:enc:aesgcm:v1:k1:")) || bytes.Contains(stored.Value, []byte("plain")) {
		t.Fatalf("etcd holds %q, want ciphertext with the aesgcm prefix", stored.Value)
	}
	// Written as Kubernetes does, with the key as authenticated data: the
	// same bytes under another key do not decrypt.
	if _, err := raw.Create(ctx, "/m/moved", stored.Value); err != nil {
		t.Fatal(err)
	}
	var te *storage.TransformError
	if _, err := s.Get(ctx, "/m/moved"); !errors.As(err, &te) || te.Key != "/m/moved" {
		t.Fatalf("Get(value moved from another key) = %v, want a TransformError for /m/moved", err)
	}
	if _, err := raw.Delete(ctx, "/m/moved", 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "/t/a")
	if err != nil || string(got.Value) != "plain-two" || got.Stale {
		t.Fatalf("Get = %q stale=%v, %v; want plain-two", got.Value, got.Stale, err)
	}
	l, err := s.List(ctx, "/t/", storage.ListOptions{Revision: c.ModRevision})
	if err != nil || len(l.KVs) != 1 || string(l.KVs[0].Value) != "plain-one" {
		t.Fatalf("List at the create's revision = %+v, %v", l.KVs, err)
	}
	if _, err := s.Update(ctx, "/t/a", []byte("x"), c.ModRevision); err == nil {
		t.Fatal("stale update succeeded")
	} else if ce := (*storage.ConflictError)(nil); !errors.As(err, &ce) || string(ce.Current.Value) != "plain-two" {
		t.Fatalf("conflict = %v, want the current plaintext", err)
	}
	d, err := s.Delete(ctx, "/t/a", u.ModRevision)
	if err != nil || string(d.Value) != "plain-two" {
		t.Fatalf("Delete = %q, %v", d.Value, err)
	}
	want := []string{"PUT plain-one", "PUT plain-two (prev plain-one)", "DELETE plain-two"}
	for i, wantEv := range want {
		if got := describe(next(t, w)); got != wantEv {
			t.Fatalf("event %d = %s, want %s", i, got, wantEv)
		}
	}
}

func next(t *testing.T, w storage.Watcher) storage.Event {
	t.Helper()
	select {
	case e := <-w.Events():
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	return storage.Event{}
}

func describe(e storage.Event) string {
	s := e.Type.String() + " " + string(e.KV.Value)
	if e.PrevKV != nil && e.Type == storage.Put {
		s += " (prev " + string(e.PrevKV.Value) + ")"
	}
	return s
}

// Rotation at the storage level: a value of an older key reads as stale
// through a config that lists it after the new one, and not at all
// through one that lacks it; a watch meeting it ends with the error.
func TestTransformRotation(t *testing.T) {
	raw := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k1 := gcm(t, "k1", 1)
	old := raw.WithTransformers(all(k1))
	if _, err := old.Create(ctx, "/r/a", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	both := raw.WithTransformers(all(value.NewPrefixTransformers(nil,
		value.PrefixTransformer{Prefix: nil, Transformer: gcm(t, "k2", 2)},
		value.PrefixTransformer{Prefix: nil, Transformer: k1})))
	got, err := both.Get(ctx, "/r/a")
	if err != nil || string(got.Value) != "secret" || !got.Stale {
		t.Fatalf("Get with (k2, k1) = %q stale=%v, %v; want secret, stale", got.Value, got.Stale, err)
	}
	onlyNew := raw.WithTransformers(all(gcm(t, "k2", 2)))
	var te *storage.TransformError
	if _, err := onlyNew.Get(ctx, "/r/a"); !errors.As(err, &te) || te.Key != "/r/a" || !strings.Contains(err.Error(), "no matching key") {
		t.Fatalf("Get without k1 = %v, want a TransformError naming /r/a", err)
	}
	if _, err := onlyNew.List(ctx, "/r/", storage.ListOptions{}); !errors.As(err, &te) {
		t.Fatalf("List without k1 = %v, want a TransformError", err)
	}
	w, err := onlyNew.Watch(ctx, "/r/", got.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if e := next(t, w); e.Type != storage.Error || !errors.As(e.Err, &te) {
		t.Fatalf("watch event = %s %v, want an Error with a TransformError", e.Type, e.Err)
	}
	if _, ok := <-w.Events(); ok {
		t.Fatal("watch went on after its error")
	}
	// Rewritten through (k2, k1), it is k2's and reads without k1.
	if _, err := both.Update(ctx, "/r/a", got.Value, got.ModRevision); err != nil {
		t.Fatal(err)
	}
	if got, err := onlyNew.Get(ctx, "/r/a"); err != nil || string(got.Value) != "secret" || got.Stale {
		t.Fatalf("Get after the rewrite = %q stale=%v, %v", got.Value, got.Stale, err)
	}
}
