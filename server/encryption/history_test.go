package encryption_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// The history store keeps an encrypted resource's values as etcd has
// them: no file of the store holds a Secret's value in plaintext (in any
// of the encodings a reader of the files could find: raw, base64), and
// the history subresource answers them decrypted.
func TestHistoryStoreKeepsSecretsEncrypted(t *testing.T) {
	cfg := encryptionConfig(t, []string{"secrets"}, aesgcm("k1", key1))
	env := testenv.Start(t, testenv.WithEncryptionProviderConfig(cfg), testenv.WithHistoryStore())
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", secrets, secret("s")), http.StatusCreated)
	patch := `{"data":{"other":"` + base64.StdEncoding.EncodeToString([]byte(secretValue+"-2")) + `"}}`
	servertest.MustCode(t, "patch", a.Do("PATCH", secrets+"/s", "application/merge-patch+json", []byte(patch)), http.StatusOK)
	// Unencrypted ConfigMaps beside them are recorded in plaintext: the
	// search below can find a value it looks for.
	servertest.MustCode(t, "configmap", a.JSON("POST", "/api/v1/namespaces/default/configmaps",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain"},"data":{"k":"visible-in-history"}}`), http.StatusCreated)

	r := a.JSON("GET", secrets+"/s/history", "")
	servertest.MustCode(t, "history", r, http.StatusOK)
	var h struct {
		Source string `json:"source"`
		Items  []struct {
			Object struct {
				Data map[string]string `json:"data"`
			} `json:"object"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &h); err != nil {
		t.Fatal(err)
	}
	if h.Source != "history" || len(h.Items) != 2 || h.Items[1].Object.Data["other"] == "" {
		t.Fatalf("history of the secret: %s", r.Body)
	}
	if got, _ := base64.StdEncoding.DecodeString(h.Items[0].Object.Data["password"]); string(got) != secretValue {
		t.Fatalf("the first revision's password %q, want it decrypted", got)
	}
	// Close the store, so that everything is in its files.
	env.Stop()
	dir := filepath.Join(env.DataDir(), "history")
	needles := [][]byte{[]byte(secretValue), []byte(base64.StdEncoding.EncodeToString([]byte(secretValue)))}
	found := map[string]bool{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, n) {
				t.Errorf("%s holds the secret's value %q in plaintext", path, n)
			}
		}
		if bytes.Contains(b, []byte("visible-in-history")) {
			found[path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no file of the store holds the ConfigMap's plaintext value: the search proves nothing")
	}
}
