package servertest

import (
	"fmt"

	"net/http"

	"strings"

	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// GCAPI is a server for garbage collection tests, with helpers to make
// owners and dependents.
type GCAPI struct {
	*API
	T *testing.T
}

func StartGC(t *testing.T, opts ...testenv.Option) *GCAPI {
	env := testenv.Start(t, opts...)
	a := NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	return &GCAPI{API: a, T: t}
}

// OwnerRef is an owner reference to the object r answered with.
func OwnerRef(t testing.TB, r Response, block bool) string {
	o := r.Object()
	md := o["metadata"].(map[string]any)
	return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q,"blockOwnerDeletion":%v}`, o["apiVersion"], o["kind"], md["name"], md["uid"], block)
}

// create makes a ConfigMap with owner references and finalizers.
func (g *GCAPI) CM(name string, finalizers []string, owners ...string) Response {
	g.T.Helper()
	extra := ""
	if len(owners) > 0 {
		extra += `,"ownerReferences":[` + strings.Join(owners, ",") + `]`
	}
	if len(finalizers) > 0 {
		extra += `,"finalizers":["` + strings.Join(finalizers, `","`) + `"]`
	}
	r := g.JSON("POST", CMs, CM(name, extra))
	MustCode(g.T, "create "+name, r, http.StatusCreated)
	return r
}

// gone waits until GET path is 404.
func (g *GCAPI) Gone(path string) {
	g.T.Helper()
	g.Eventually(path+" deleted", func() (bool, string) {
		r := g.JSON("GET", path, "")
		return r.Code == http.StatusNotFound, fmt.Sprintf("%d %s", r.Code, Truncate(r.Body))
	})
}

// Eventually waits up to 20 s for cond.
func (g *GCAPI) Eventually(what string, cond func() (bool, string)) {
	g.T.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			g.T.Fatalf("%s: not within 20 s; last: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// release removes every finalizer of the object at path.
func (g *GCAPI) Release(path string) Response {
	g.T.Helper()
	return g.Do("PATCH", path, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
}

// stays checks that path still exists after the collector had time to act.
func (g *GCAPI) Stays(path string) Response {
	g.T.Helper()
	time.Sleep(500 * time.Millisecond)
	r := g.JSON("GET", path, "")
	MustCode(g.T, "get "+path, r, http.StatusOK)
	return r
}

func MetaOf(r Response) map[string]any {
	md, _ := r.Object()["metadata"].(map[string]any)
	return md
}

func FinalizersOf(r Response) []string {
	var out []string
	fs, _ := MetaOf(r)["finalizers"].([]any)
	for _, f := range fs {
		out = append(out, f.(string))
	}
	return out
}
