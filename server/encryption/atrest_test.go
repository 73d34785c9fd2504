package encryption_test

import (
	"bytes"

	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/testenv"
)

// Encryption at rest, checked as an operator would: the values in etcd
// (read with a plain etcd client, no keys) and what the API answers.

const (
	secrets     = "/api/v1/namespaces/default/secrets"
	secretValue = "correct-horse-battery-staple"
	// Secret keys of the providers, base64 as the file has them.
	key1 = "c2VjcmV0IGlzIHNlY3VyZSwgc2VjcmV0IGlzIGdvb2Q=" // 32 bytes
	key2 = "dGhpcyBpcyBhbm90aGVyIHNlY3JldCBrZXkgb2YgMzI=" // 32 bytes
)

// secretKey is the etcd key of a Secret in default.
func secretKey(name string) string { return "/registry/core/secrets/default/" + name }

func secret(name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":%q,"labels":{"app":"enc"}},"data":{"password":%q}}`,
		name, base64.StdEncoding.EncodeToString([]byte(secretValue)))
}

// encryptionConfig writes an EncryptionConfiguration for resources with
// providers (YAML list items, in order) and returns its path.
func encryptionConfig(t *testing.T, resources []string, providers ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n")
	for _, r := range resources {
		fmt.Fprintf(&b, "  - %q\n", r)
	}
	b.WriteString("  providers:\n")
	for _, p := range providers {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func aesgcm(name, secret string) string {
	return fmt.Sprintf("aesgcm: {keys: [{name: %s, secret: %s}]}", name, secret)
}

const identity = "identity: {}"

// stored returns the value etcd holds under key.
func stored(t *testing.T, raw *etcd.Store, key string) []byte {
	t.Helper()
	kv, err := raw.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	return kv.Value
}

// wantEncrypted fails unless key's value in etcd starts with prefix and
// shows nothing of the object.
func wantEncrypted(t *testing.T, raw *etcd.Store, key, prefix string) {
	t.Helper()
	v := stored(t, raw, key)
	if !bytes.HasPrefix(v, []byte(prefix)) {
		t.Fatalf("etcd %s = %.60q..., want prefix %s", key, v, prefix)
	}
	name := key[strings.LastIndex(key, "/")+1:]
	for _, plain := range []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue)), `"name":"` + name + `"`, `"kind"`, `"enc"`} {
		if bytes.Contains(v, []byte(plain)) {
			t.Fatalf("etcd %s holds plaintext %q: %.60q...", key, plain, v)
		}
	}
}

func wantPlaintext(t *testing.T, raw *etcd.Store, key string) {
	t.Helper()
	if v := stored(t, raw, key); !json.Valid(v) {
		t.Fatalf("etcd %s = %.60q..., want plain JSON", key, v)
	}
}

// wantSecret fails unless r is the secret with its plaintext data.
func wantSecret(t *testing.T, what string, r servertest.Response) {
	t.Helper()
	servertest.MustCode(t, what, r, http.StatusOK)
	if !strings.Contains(string(r.Body), base64.StdEncoding.EncodeToString([]byte(secretValue))) {
		t.Fatalf("%s = %s, want the secret's data", what, servertest.Truncate(r.Body))
	}
}

// rewriteAll puts every object of list back unchanged, as `kubectl get
// -o json | kubectl replace -f -` does (a replace that changes nothing
// writes only a stale value).
func rewriteAll(t *testing.T, a *servertest.API, list string) {
	t.Helper()
	r := a.JSON("GET", list, "")
	servertest.MustCode(t, "list", r, http.StatusOK)
	var l struct{ Items []map[string]any }
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	for _, it := range l.Items {
		name := it["metadata"].(map[string]any)["name"].(string)
		b, _ := json.Marshal(it)
		servertest.MustCode(t, "replace "+name, a.JSON("PUT", list+"/"+name, string(b)), http.StatusOK)
	}
}

// TestEncryptionAtRest: with aesgcm for secrets, etcd holds only
// ciphertext with Kubernetes' prefix, and every read (get, list, watch,
// history, another server's watch cache filled from etcd) answers the
// plaintext; a resource not listed stays plaintext.
func TestEncryptionAtRest(t *testing.T) {
	cfg := encryptionConfig(t, []string{"secrets"}, aesgcm("key1", key1), identity)
	shared := testenv.StartEtcd(t)
	env := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(cfg))
	a := servertest.NewAPI(t, env)
	raw := servertest.RawStore(t, env) // no keys: etcd as it is stored

	start := servertest.RVOf(t, a.JSON("GET", secrets, ""))
	created := a.JSON("POST", secrets, secret("s1"))
	servertest.MustCode(t, "create", created, http.StatusCreated)
	wantEncrypted(t, raw, secretKey("s1"), "k8s:enc:aesgcm:v1:key1:")
	servertest.MustCode(t, "create configmap", a.JSON("POST", servertest.CMs, servertest.CM("plain", "")), http.StatusCreated)
	wantPlaintext(t, raw, "/registry/core/configmaps/default/plain")

	wantSecret(t, "get", a.JSON("GET", secrets+"/s1", ""))
	wantSecret(t, "list", a.JSON("GET", secrets, ""))
	wantSecret(t, "list from the cache", a.JSON("GET", secrets+"?resourceVersion=0", ""))
	wantSecret(t, "list from etcd", a.JSON("GET", secrets+"?limit=1", ""))

	// An update re-encrypts (GCM is not deterministic: new bytes); one that
	// changes nothing is still recognised as such, on the plaintext.
	before := stored(t, raw, secretKey("s1"))
	upd := a.Do("PATCH", secrets+"/s1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"v":"2"}}}`))
	servertest.MustCode(t, "patch", upd, http.StatusOK)
	wantEncrypted(t, raw, secretKey("s1"), "k8s:enc:aesgcm:v1:key1:")
	if bytes.Equal(before, stored(t, raw, secretKey("s1"))) {
		t.Fatal("the patch left etcd's bytes as they were")
	}
	noop := a.Do("PATCH", secrets+"/s1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"v":"2"}}}`))
	servertest.MustCode(t, "no-op patch", noop, http.StatusOK)
	if servertest.RVOf(t, noop) != servertest.RVOf(t, upd) {
		t.Fatalf("a patch changing nothing wrote a new revision %s (was %s)", servertest.RVOf(t, noop), servertest.RVOf(t, upd))
	}

	// Watches, from the watch cache and from etcd (a resourceVersion
	// before this server's cache history is not needed: both paths decode
	// what the storage decrypted), see the plaintext of both events.
	evs := servertest.WatchLines(t, a, secrets+"?watch=1&resourceVersion="+start, 2)
	for i, e := range evs {
		if !strings.Contains(e, base64.StdEncoding.EncodeToString([]byte(secretValue))) {
			t.Fatalf("watch event %d = %s, want the secret's data", i, e)
		}
	}
	if !strings.Contains(evs[0], `"ADDED"`) || !strings.Contains(evs[1], `"MODIFIED"`) || !strings.Contains(evs[1], `"v":"2"`) {
		t.Fatalf("watch events = %v, want ADDED then the MODIFIED patch", evs)
	}

	// History reads older revisions from etcd: decrypted too.
	h := a.JSON("GET", secrets+"/s1/history", "")
	servertest.MustCode(t, "history", h, http.StatusOK)
	if n := strings.Count(string(h.Body), base64.StdEncoding.EncodeToString([]byte(secretValue))); n < 2 {
		t.Fatalf("history = %s, want both revisions' data", servertest.Truncate(h.Body))
	}

	// A second server fills its watch cache from etcd's ciphertext.
	env2 := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(cfg))
	b := servertest.NewAPI(t, env2)
	wantSecret(t, "second server's cached list", b.JSON("GET", secrets+"?resourceVersion=0", ""))
	servertest.MustCode(t, "delete", b.JSON("DELETE", secrets+"/s1", ""), http.StatusOK)
	servertest.MustCode(t, "get deleted", a.JSON("GET", secrets+"/s1", ""), http.StatusNotFound)
}

// TestEncryptionProviders: aescbc and secretbox round trips; an identity
// first configuration reads what was encrypted before and writes
// plaintext, rewriting the stale value.
func TestEncryptionProviders(t *testing.T) {
	for _, p := range []struct{ name, provider, prefix string }{
		{"aescbc", "aescbc: {keys: [{name: cbc1, secret: " + key1 + "}]}", "k8s:enc:aescbc:v1:cbc1:"},
		{"secretbox", "secretbox: {keys: [{name: box1, secret: " + key2 + "}]}", "k8s:enc:secretbox:v1:box1:"},
	} {
		t.Run(p.name, func(t *testing.T) {
			shared := testenv.StartEtcd(t)
			env := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(encryptionConfig(t, []string{"secrets"}, p.provider)))
			a := servertest.NewAPI(t, env)
			raw := servertest.RawStore(t, env)
			servertest.MustCode(t, "create", a.JSON("POST", secrets, secret("s1")), http.StatusCreated)
			wantEncrypted(t, raw, secretKey("s1"), p.prefix)
			wantSecret(t, "get", a.JSON("GET", secrets+"/s1", ""))
			env.Stop()

			// Decrypting away: identity first, the old provider after it.
			env = testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(encryptionConfig(t, []string{"secrets"}, identity, p.provider)))
			a = servertest.NewAPI(t, env)
			wantSecret(t, "get with identity first", a.JSON("GET", secrets+"/s1", ""))
			servertest.MustCode(t, "create s2", a.JSON("POST", secrets, secret("s2")), http.StatusCreated)
			wantPlaintext(t, raw, secretKey("s2"))
			rewriteAll(t, a, secrets)
			wantPlaintext(t, raw, secretKey("s1"))
		})
	}
}

// TestEncryptionKeyRotation follows Kubernetes' procedure: key1; then
// key2 first with key1 still listed (old secrets read, new writes use
// key2); every secret rewritten; then key2 alone.
func TestEncryptionKeyRotation(t *testing.T) {
	shared := testenv.StartEtcd(t)
	start := func(providers ...string) *servertest.API {
		env := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(encryptionConfig(t, []string{"secrets"}, providers...)))
		t.Cleanup(env.Stop)
		return servertest.NewAPI(t, env)
	}
	one := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(encryptionConfig(t, []string{"secrets"}, aesgcm("key1", key1))))
	a := servertest.NewAPI(t, one)
	raw := servertest.RawStore(t, one)
	for _, n := range []string{"s1", "s2"} {
		servertest.MustCode(t, "create "+n, a.JSON("POST", secrets, secret(n)), http.StatusCreated)
		wantEncrypted(t, raw, secretKey(n), "k8s:enc:aesgcm:v1:key1:")
	}
	one.Stop()

	a = start("aesgcm: {keys: [{name: key2, secret: " + key2 + "}, {name: key1, secret: " + key1 + "}]}")
	wantSecret(t, "old secret with (key2, key1)", a.JSON("GET", secrets+"/s1", ""))
	servertest.MustCode(t, "create s3", a.JSON("POST", secrets, secret("s3")), http.StatusCreated)
	wantEncrypted(t, raw, secretKey("s3"), "k8s:enc:aesgcm:v1:key2:")
	wantEncrypted(t, raw, secretKey("s2"), "k8s:enc:aesgcm:v1:key1:")
	rewriteAll(t, a, secrets)
	for _, n := range []string{"s1", "s2", "s3"} {
		wantEncrypted(t, raw, secretKey(n), "k8s:enc:aesgcm:v1:key2:")
	}

	a = start(aesgcm("key2", key2))
	for _, n := range []string{"s1", "s2", "s3"} {
		wantSecret(t, "get "+n+" with key2 only", a.JSON("GET", secrets+"/"+n, ""))
	}
	wantSecret(t, "list with key2 only", a.JSON("GET", secrets, ""))
}

// TestEncryptionMissingKey: a server without the key a value was written
// with answers an internal error naming the key, never the bytes; so does
// one without any configuration.
func TestEncryptionMissingKey(t *testing.T) {
	shared := testenv.StartEtcd(t)
	env := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(encryptionConfig(t, []string{"secrets"}, aesgcm("key1", key1))))
	before := servertest.RVOf(t, servertest.NewAPI(t, env).JSON("GET", secrets, ""))
	servertest.MustCode(t, "create", servertest.NewAPI(t, env).JSON("POST", secrets, secret("s1")), http.StatusCreated)
	env.Stop()
	for _, c := range []struct {
		name   string
		config string
		want   string
	}{
		{"other key", encryptionConfig(t, []string{"secrets"}, aesgcm("key2", key2)), "no matching key was found for the provided AES transformer"},
		{"secrets not listed", encryptionConfig(t, []string{"configmaps"}, aesgcm("key1", key1)), "identity transformer tried to read encrypted data"},
		{"no configuration", "", "identity transformer tried to read encrypted data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.WithEtcd(shared), testenv.WithEncryptionProviderConfig(c.config))
			a := servertest.NewAPI(t, env)
			// The secrets' watch cache cannot list: reads it would serve go
			// to etcd and get etcd's error at once, whatever their
			// resourceVersion (see storage/watchcache).
			for _, path := range []string{secrets + "/s1", secrets + "/s1?resourceVersion=0", secrets, secrets + "?limit=10",
				secrets + "?resourceVersion=0", secrets + "/s1/history", secrets + "?watch=1&resourceVersion=0",
				secrets + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"} {
				began := time.Now()
				r := a.JSON("GET", path, "")
				if d := time.Since(began); d > 2*time.Second {
					t.Errorf("GET %s took %v", path, d)
				}
				s := r.Status()
				if r.Code != http.StatusInternalServerError || s.Reason != "InternalError" ||
					!strings.Contains(s.Message, "Key: "+secretKey("s1")+",") || !strings.Contains(s.Message, c.want) {
					t.Errorf("GET %s = %d %s, want 500 InternalError naming the key: %s", path, r.Code, servertest.Truncate(r.Body), c.want)
				}
				if strings.Contains(string(r.Body), "k8s:enc") {
					t.Errorf("GET %s served the stored bytes: %s", path, servertest.Truncate(r.Body))
				}
			}
			// A watch from before the write ends at it with the error, as
			// Kubernetes' etcd watch does.
			ev := servertest.WatchLines(t, a, secrets+"?watch=1&resourceVersion="+before, 1)[0]
			if !strings.Contains(ev, `"type":"ERROR"`) || !strings.Contains(ev, "Key: "+secretKey("s1")+",") || !strings.Contains(ev, c.want) {
				t.Errorf("watch from before the write = %s, want an ERROR naming the key", ev)
			}
			// Writes over it fail the same way; a delete needs the object
			// read first, as in Kubernetes.
			r := a.JSON("PUT", secrets+"/s1", secret("s1"))
			if r.Code != http.StatusInternalServerError || !strings.Contains(r.Status().Message, c.want) {
				t.Errorf("PUT = %d %s, want 500", r.Code, servertest.Truncate(r.Body))
			}
		})
	}
}

// TestEncryptionCustomResourcesAndWildcards: a custom resource listed by
// group and plural, "*.group" and "*.*" are encrypted; objwatch's own
// bookkeeping keys are not.
func TestEncryptionCustomResourcesAndWildcards(t *testing.T) {
	for _, c := range []struct {
		resources  []string
		configmaps bool // encrypted too
	}{
		{[]string{"widgets.scale.objwatch.io"}, false},
		{[]string{"*.scale.objwatch.io"}, false},
		{[]string{"*.*"}, true},
	} {
		t.Run(c.resources[0], func(t *testing.T) {
			env := testenv.Start(t, testenv.WithEncryptionProviderConfig(encryptionConfig(t, c.resources, aesgcm("key1", key1))))
			a := servertest.NewAPI(t, env)
			raw := servertest.RawStore(t, env)
			servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD), http.StatusCreated)
			servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.JSON("GET", servertest.Widgets, "").Code == http.StatusOK })
			servertest.MustCode(t, "create widget", a.JSON("POST", servertest.Widgets, servertest.Widget("w1", `"image":"`+secretValue+`"`)), http.StatusCreated)
			servertest.MustCode(t, "create configmap", a.JSON("POST", servertest.CMs, servertest.CM("c1", "")), http.StatusCreated)
			wantEncrypted(t, raw, "/registry/scale.objwatch.io/widgets/default/w1", "k8s:enc:aesgcm:v1:key1:")
			if r := a.JSON("GET", servertest.Widgets+"/w1", ""); r.Code != http.StatusOK || !strings.Contains(string(r.Body), secretValue) {
				t.Fatalf("get widget = %d %s", r.Code, servertest.Truncate(r.Body))
			}
			if c.configmaps {
				wantEncrypted(t, raw, "/registry/core/configmaps/default/c1", "k8s:enc:aesgcm:v1:key1:")
			} else {
				wantPlaintext(t, raw, "/registry/core/configmaps/default/c1")
			}
			// The default/kubernetes service's cluster IP claim and this
			// server's service-account public key stay readable as they are.
			for _, prefix := range []string{"/registry/ranges/serviceips/", "/registry/objwatch.io/serviceaccountkeys/"} {
				var l storage.ListResult
				deadline := time.Now().Add(5 * time.Second)
				for {
					var err error
					if l, err = raw.List(t.Context(), prefix, storage.ListOptions{}); err != nil {
						t.Fatal(err)
					}
					if len(l.KVs) > 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if len(l.KVs) == 0 {
					t.Fatalf("nothing under %s", prefix)
				}
				for _, kv := range l.KVs {
					if bytes.HasPrefix(kv.Value, []byte("k8s:enc:")) {
						t.Fatalf("etcd %s = %.60q..., want it as objwatch wrote it", kv.Key, kv.Value)
					}
				}
			}
		})
	}
}
