package access_test

import (
	"bufio"
	"context"

	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// tenant sets up namespaces a and b and lets alice read configmaps in a.
func tenant(t *testing.T, admin *servertest.API) {
	t.Helper()
	admin.Must("POST", "/api/v1/namespaces", servertest.Namespace("a"))
	admin.Must("POST", "/api/v1/namespaces", servertest.Namespace("b"))
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", servertest.RoleReader)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", servertest.BindAlice)
	for _, ns := range []string{"a", "b"} {
		admin.Must("POST", "/api/v1/namespaces/"+ns+"/configmaps", servertest.CM("one", ""))
	}
}

// TestTenantScopedAccess: a user allowed to read in one namespace lists
// and watches there, and gets Kubernetes' 403 elsewhere before anything is
// read; discovery stays open to every authenticated user.
func TestTenantScopedAccess(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	alice := servertest.UserAPI(t, env, "alice")
	servertest.Eventually(t, "alice's binding", func() bool { return alice.JSON("GET", "/api/v1/namespaces/a/configmaps", "").Code == 200 })

	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/api/v1/namespaces/b/configmaps", "", `configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "b"`},
		{"GET", "/api/v1/configmaps", "", `configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope`},
		{"GET", "/api/v1/namespaces/b/configmaps?watch=1", "", `configmaps is forbidden: User "alice" cannot watch resource "configmaps" in API group "" in the namespace "b"`},
		{"GET", "/api/v1/namespaces/b/configmaps/one", "", `configmaps "one" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "b"`},
		{"POST", "/api/v1/namespaces/a/configmaps", servertest.CM("two", ""), `configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "a"`},
		{"DELETE", "/api/v1/namespaces/a/configmaps/one", "", `configmaps "one" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "a"`},
		{"GET", "/api/v1/namespaces/a/secrets", "", `secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "a"`},
		{"GET", "/metrics", "", `forbidden: User "alice" cannot get path "/metrics"`},
	} {
		r := alice.JSON(tc.method, tc.path, tc.body)
		if s := r.Status(); r.Code != http.StatusForbidden || s.Reason != "Forbidden" || s.Message != tc.want {
			t.Errorf("%s %s as alice = %d %s\nwant 403 %q", tc.method, tc.path, r.Code, r.Body, tc.want)
		}
	}
	for _, path := range []string{"/api/v1/namespaces/a/configmaps", "/api/v1/namespaces/a/configmaps/one", "/api", "/apis", "/api/v1", "/version", "/openapi/v2"} {
		if r := alice.JSON("GET", path, ""); r.Code != http.StatusOK {
			t.Errorf("GET %s as alice = %d %s, want 200", path, r.Code, servertest.Truncate(r.Body))
		}
	}
	if r := admin.JSON("GET", "/api/v1/namespaces/a/configmaps/two", ""); r.Code != http.StatusNotFound {
		t.Errorf("alice's refused create stored an object: %d", r.Code)
	}
}

// TestRevokedWatchEnds: an open watch whose permission is revoked ends
// with a 403 ERROR event within 2 s instead of streaming until its
// timeout; until then it only ever sees its own namespace.
func TestRevokedWatchEnds(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	alice := servertest.UserAPI(t, env, "alice")
	servertest.Eventually(t, "alice's binding", func() bool { return alice.JSON("GET", "/api/v1/namespaces/a/configmaps", "").Code == 200 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", alice.Host+"/api/v1/namespaces/a/configmaps?watch=1&resourceVersion=0", nil)
	resp, err := alice.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("watch as alice = %d", resp.StatusCode)
	}
	events := make(chan map[string]any, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	// Churn in both namespaces: only a's reach alice.
	for i := range 20 {
		for _, ns := range []string{"b", "a"} {
			admin.Must("POST", "/api/v1/namespaces/"+ns+"/configmaps", servertest.CM("c"+string(rune('a'+i)), ""))
		}
	}
	seen := 0
	for seen < 21 { // one from the initial state, twenty created
		ev := <-events
		md, _ := ev["object"].(map[string]any)["metadata"].(map[string]any)
		if ev["type"] != "ADDED" || md["namespace"] != "a" {
			t.Fatalf("alice's watch of a got %v", ev)
		}
		seen++
	}
	admin.Must("DELETE", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings/alice-reads", "")
	revoked := time.Now()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("watch ended without an ERROR event")
		}
		st, _ := ev["object"].(map[string]any)
		if ev["type"] != "ERROR" || st["code"] != float64(403) || !strings.Contains(st["message"].(string), `User "alice" cannot watch resource "configmaps"`) {
			t.Fatalf("after revocation: %v, want an ERROR event with the 403", ev)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the watch went on 2 s after its binding was deleted")
	}
	t.Logf("watch ended %v after the binding was deleted", time.Since(revoked))
	if _, ok := <-events; ok {
		t.Fatal("events after the ERROR event")
	}
}

// TestRBACEscalationRefused: a user may write roles and bindings only
// for permissions it holds (or with escalate / bind), as in Kubernetes.
func TestRBACEscalationRefused(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"rbac-writer"},
		"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles","rolebindings"],"verbs":["create","get"]},
		{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"bob-writes"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"rbac-writer"},"subjects":[{"kind":"User","name":"bob"}]}`)
	bob := servertest.UserAPI(t, env, "bob")
	servertest.Eventually(t, "bob's binding", func() bool {
		return bob.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles/rbac-writer", "").Code == 200
	})
	// A role with a rule bob holds is fine; one with more is refused.
	if r := bob.JSON("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"ok"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`); r.Code != http.StatusCreated {
		t.Fatalf("role within bob's rules = %d %s", r.Code, r.Body)
	}
	r := bob.JSON("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"more"},
		"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}`)
	const wantRole = `roles.rbac.authorization.k8s.io "more" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`
	if s := r.Status(); r.Code != http.StatusForbidden || s.Message != wantRole {
		t.Errorf("role with more rules = %d %s\nwant 403 %q", r.Code, r.Body, wantRole)
	}
	// Binding cluster-admin: refused, and nothing stored.
	r = bob.JSON("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"root"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","name":"bob"}]}`)
	if s := r.Status(); r.Code != http.StatusForbidden || !strings.Contains(s.Message, "is attempting to grant RBAC permissions not currently held") {
		t.Errorf("binding cluster-admin = %d %s, want 403", r.Code, r.Body)
	}
	for _, path := range []string{"roles/more", "rolebindings/root"} {
		if r := admin.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/"+path, ""); r.Code != http.StatusNotFound {
			t.Errorf("refused %s was stored: %d", path, r.Code)
		}
	}
}

// TestAccessReviews: SelfSubjectAccessReview, SubjectAccessReview,
// SelfSubjectRulesReview and SelfSubjectReview answer as kube-apiserver.
func TestAccessReviews(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	alice := servertest.UserAPI(t, env, "alice", "devs")
	servertest.Eventually(t, "alice's binding", func() bool { return alice.JSON("GET", "/api/v1/namespaces/a/configmaps", "").Code == 200 })
	ssar := func(c *servertest.API, ns, verb string) bool {
		r := c.JSON("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
			"spec":{"resourceAttributes":{"namespace":"`+ns+`","verb":"`+verb+`","resource":"configmaps"}}}`)
		if r.Code != http.StatusCreated {
			t.Fatalf("SelfSubjectAccessReview = %d %s", r.Code, r.Body)
		}
		st, _ := r.Object()["status"].(map[string]any)
		return st["allowed"] == true
	}
	if !ssar(alice, "a", "list") || ssar(alice, "b", "list") || ssar(alice, "a", "create") || !ssar(admin, "b", "create") {
		t.Error("SelfSubjectAccessReview answers differ from alice's and admin's permissions")
	}
	r := admin.JSON("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
		"spec":{"user":"alice","resourceAttributes":{"namespace":"a","verb":"watch","resource":"configmaps"}}}`)
	if st, _ := r.Object()["status"].(map[string]any); r.Code != http.StatusCreated || st["allowed"] != true ||
		st["reason"] != `RBAC: allowed by RoleBinding "alice-reads/a" of Role "cm-reader" to User "alice"` {
		t.Errorf("SubjectAccessReview for alice = %d %s", r.Code, r.Body)
	}
	if r := alice.JSON("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
		"spec":{"user":"bob","resourceAttributes":{"verb":"get","resource":"secrets"}}}`); r.Code != http.StatusForbidden {
		t.Errorf("SubjectAccessReview by alice (not allowed to create them) = %d %s", r.Code, r.Body)
	}
	r = alice.JSON("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectRulesReview","spec":{"namespace":"a"}}`)
	if !strings.Contains(string(r.Body), `{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch"]}`) {
		t.Errorf("SelfSubjectRulesReview of alice in a = %d %s", r.Code, r.Body)
	}
	r = alice.JSON("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	if !strings.Contains(string(r.Body), `"userInfo":{"groups":["devs","system:authenticated"],"username":"alice"}`) {
		t.Errorf("SelfSubjectReview of alice = %d %s", r.Code, r.Body)
	}
}

// TestImpersonation: a user allowed to impersonate acts as the other user
// (with that user's permissions); one who is not gets Kubernetes' 403.
func TestImpersonation(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	as := func(c *servertest.API, path, user string) servertest.Response {
		req, _ := http.NewRequest("GET", c.Host+path, nil)
		req.Header.Set("Impersonate-User", user)
		resp, err := c.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		return servertest.Response{Code: resp.StatusCode, Body: []byte(b.String())}
	}
	// admin (system:masters) may impersonate; alice reads a, not b.
	servertest.Eventually(t, "alice's binding", func() bool { return as(admin, "/api/v1/namespaces/a/configmaps", "alice").Code == 200 })
	if r := as(admin, "/api/v1/namespaces/b/configmaps", "alice"); r.Code != http.StatusForbidden ||
		!strings.Contains(r.Status().Message, `User "alice" cannot list resource "configmaps"`) {
		t.Errorf("admin as alice in b = %d %s, want alice's 403", r.Code, r.Body)
	}
	// carol may not impersonate: kube-apiserver v1.37.2's answer.
	carol := servertest.UserAPI(t, env, "carol")
	r := as(carol, "/api/v1/namespaces/a/configmaps", "alice")
	const want = `configmaps is forbidden: User "carol" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "a"`
	if s := r.Status(); r.Code != http.StatusForbidden || s.Message != want {
		t.Errorf("carol as alice = %d %s\nwant 403 %q", r.Code, r.Body, want)
	}
	if r := as(carol, "/api/v1/namespaces/a/configmaps", "system:admin"); r.Code != http.StatusForbidden {
		t.Errorf("carol impersonating an admin = %d", r.Code)
	}
}

// TestBindingSeenByOtherServer: two servers on one etcd; a binding
// created through one takes effect on the other within a second.
func TestBindingSeenByOtherServer(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	one := testenv.Start(t, testenv.WithEtcd(etcd))
	two := testenv.Start(t, testenv.WithEtcd(etcd))
	tenant(t, servertest.NewAPI(t, one))
	alice := servertest.UserAPI(t, two, "alice")
	servertest.Eventually(t, "the binding on the other server", func() bool {
		return alice.JSON("GET", "/api/v1/namespaces/a/configmaps", "").Code == 200
	})
}

// TestKubectlAuth: kubectl auth can-i (and --list, --as), auth whoami,
// create token and --as work as against Kubernetes.
func TestKubectlAuth(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	aliceKC := env.UserKubeconfig(t, "alice")
	kubectl := func(kubeconfig string, args ...string) (string, error) {
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	servertest.Eventually(t, "alice's binding", func() bool {
		out, _ := kubectl(aliceKC, "auth", "can-i", "list", "configmaps", "-n", "a")
		return out == "yes"
	})
	for _, tc := range []struct {
		kc   string
		args []string
		want string
	}{
		{aliceKC, []string{"auth", "can-i", "list", "configmaps", "-n", "b"}, "no"},
		{aliceKC, []string{"auth", "can-i", "create", "configmaps", "-n", "a"}, "no"},
		{env.Kubeconfig, []string{"auth", "can-i", "list", "configmaps", "-n", "a", "--as", "alice"}, "yes"},
		{env.Kubeconfig, []string{"auth", "can-i", "delete", "namespaces", "--all-namespaces"}, "yes"},
	} {
		if out, _ := kubectl(tc.kc, tc.args...); out != tc.want {
			t.Errorf("kubectl %s = %q, want %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
	if out, err := kubectl(aliceKC, "auth", "can-i", "--list", "-n", "a"); err != nil || !strings.Contains(out, "configmaps") || !strings.Contains(out, "[get list watch]") {
		t.Errorf("kubectl auth can-i --list = %v\n%s", err, out)
	}
	if out, err := kubectl(aliceKC, "auth", "whoami"); err != nil || !strings.Contains(out, "alice") || !strings.Contains(out, "system:authenticated") {
		t.Errorf("kubectl auth whoami = %v\n%s", err, out)
	}
	if out, err := kubectl(env.Kubeconfig, "get", "configmaps", "-n", "b", "--as", "alice"); err == nil || !strings.Contains(out, `User "alice" cannot list resource "configmaps"`) {
		t.Errorf("kubectl --as alice in b = %v\n%s", err, out)
	}
	// A service account's token: kubectl create token, then use it.
	admin.Must("POST", "/api/v1/namespaces/a/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"bot"}}`)
	token, err := kubectl(env.Kubeconfig, "create", "token", "bot", "-n", "a")
	if err != nil || strings.Count(token, ".") != 2 {
		t.Fatalf("kubectl create token = %v\n%s", err, token)
	}
	kc, err := auth.Kubeconfig(env.Config.Host, env.Config.CAData, "bot", nil, nil, token)
	if err != nil {
		t.Fatal(err)
	}
	botKC := filepath.Join(t.TempDir(), "bot.kubeconfig")
	if err := os.WriteFile(botKC, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(botKC, "auth", "whoami"); err != nil || !strings.Contains(out, "system:serviceaccount:a:bot") {
		t.Errorf("whoami with the token = %v\n%s", err, out)
	}
	admin.Must("DELETE", "/api/v1/namespaces/a/serviceaccounts/bot", "")
	servertest.Eventually(t, "the deleted account's token refused", func() bool {
		out, err := kubectl(botKC, "auth", "whoami")
		return err != nil && strings.Contains(out, "Unauthorized")
	})
}

// TestServiceAccountTokensAcrossServers: a token one server issues is
// accepted by another on the same etcd (each has its own signing key and
// publishes its public half), and by neither once the account is gone;
// a forged or wrong-audience token is a 401.
func TestServiceAccountTokensAcrossServers(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	one := testenv.Start(t, testenv.WithEtcd(etcd))
	two := testenv.Start(t, testenv.WithEtcd(etcd))
	admin := servertest.NewAPI(t, one)
	admin.Must("POST", "/api/v1/namespaces/default/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"bot"}}`)
	issue := func(spec string) string {
		r := admin.Must("POST", "/api/v1/namespaces/default/serviceaccounts/bot/token", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{`+spec+`}}`)
		st, _ := r.Object()["status"].(map[string]any)
		token, _ := st["token"].(string)
		if token == "" {
			t.Fatalf("TokenRequest = %s", r.Body)
		}
		return token
	}
	token := issue("")
	whoami := func(env *testenv.Env, token string) servertest.Response {
		return servertest.TokenAPI(t, env, token).JSON("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	}
	for i, env := range []*testenv.Env{one, two} {
		servertest.Eventually(t, "the token accepted by server "+string(rune('1'+i)), func() bool {
			r := whoami(env, token)
			return r.Code == http.StatusCreated && strings.Contains(string(r.Body), `"username":"system:serviceaccount:default:bot"`)
		})
	}
	if r := admin.JSON("POST", "/api/v1/namespaces/default/serviceaccounts/bot/token", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":300}}`); r.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(r.Status().Message, "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes") {
		t.Errorf("TokenRequest for 5 minutes = %d %s", r.Code, r.Body)
	}
	other := issue(`"audiences":["elsewhere"]`)
	forged := token[:len(token)-4] + "AAAA"
	for name, tok := range map[string]string{"wrong audience": other, "forged": forged, "garbage": "not-a-token"} {
		if r := whoami(two, tok); r.Code != http.StatusUnauthorized {
			t.Errorf("%s token = %d %s, want 401", name, r.Code, r.Body)
		}
	}
	admin.Must("DELETE", "/api/v1/namespaces/default/serviceaccounts/bot", "")
	for _, env := range []*testenv.Env{one, two} {
		servertest.Eventually(t, "the deleted account's token refused", func() bool { return whoami(env, token).Code == http.StatusUnauthorized })
	}
}

// TestRBACAggregationAndResourceNames: a ClusterRole labelled to
// aggregate into view extends what view's holders may do, at once; a rule
// with resourceNames allows get of that name, and list or watch only with
// a metadata.name field selector, as in Kubernetes.
func TestRBACAggregationAndResourceNames(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	admin.Must("POST", "/api/v1/namespaces", servertest.Namespace("a"))
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"dana-views"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"dana"}]}`)
	dana := servertest.UserAPI(t, env, "dana")
	servertest.Eventually(t, "dana's view binding", func() bool { return dana.JSON("GET", "/api/v1/namespaces/a/configmaps", "").Code == 200 })
	if r := dana.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", ""); r.Code != http.StatusForbidden {
		t.Fatalf("view lets dana list roles: %d", r.Code)
	}
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
		"metadata":{"name":"roles-view","labels":{"rbac.authorization.k8s.io/aggregate-to-view":"true"}},
		"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],"verbs":["list"]}]}`)
	servertest.Eventually(t, "view aggregating roles-view", func() bool {
		return dana.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", "").Code == 200
	})
	if r := admin.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", ""); !strings.Contains(string(r.Body), `"resources":["roles"]`) {
		t.Errorf("view's stored rules lack the aggregated one: %s", servertest.Truncate(r.Body))
	}

	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"one-secret"},
		"rules":[{"apiGroups":[""],"resources":["secrets"],"resourceNames":["s1"],"verbs":["get","list","watch"]}]}`)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"erin-s1"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"one-secret"},"subjects":[{"kind":"User","name":"erin"}]}`)
	admin.Must("POST", "/api/v1/namespaces/a/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1"}}`)
	admin.Must("POST", "/api/v1/namespaces/a/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s2"}}`)
	erin := servertest.UserAPI(t, env, "erin")
	servertest.Eventually(t, "erin's binding", func() bool { return erin.JSON("GET", "/api/v1/namespaces/a/secrets/s1", "").Code == 200 })
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/v1/namespaces/a/secrets/s2", http.StatusForbidden},
		{"/api/v1/namespaces/a/secrets", http.StatusForbidden},
		{"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Ds1", http.StatusOK},
		{"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Ds2", http.StatusForbidden},
		{"/api/v1/namespaces/a/secrets?watch=1&fieldSelector=metadata.name%3Ds1&timeoutSeconds=1", http.StatusOK},
	} {
		if r := erin.JSON("GET", tc.path, ""); r.Code != tc.code {
			t.Errorf("GET %s as erin = %d %s, want %d", tc.path, r.Code, servertest.Truncate(r.Body), tc.code)
		}
	}
}

// TestTokenReviewAndLocalAccessReview: TokenReview says whose a token is
// (and why not, in Kubernetes' words); LocalSubjectAccessReview answers
// for its namespace only; impersonating system:masters needs the verb.
func TestTokenReviewAndLocalAccessReview(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	tenant(t, admin)
	review := func(token string) map[string]any {
		r := admin.Must("POST", "/apis/authentication.k8s.io/v1/tokenreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"`+token+`"}}`)
		st, _ := r.Object()["status"].(map[string]any)
		return st
	}
	if st := review(env.Config.BearerToken); st["authenticated"] != true || st["user"].(map[string]any)["username"] != "admin" {
		t.Errorf("TokenReview of the admin token = %v", st)
	}
	if st := review("nope"); st["authenticated"] == true || st["error"] != "invalid bearer token" {
		t.Errorf("TokenReview of a bad token = %v, want error %q", st, "invalid bearer token")
	}
	lsar := func(ns, specNS string) servertest.Response {
		return admin.JSON("POST", "/apis/authorization.k8s.io/v1/namespaces/"+ns+"/localsubjectaccessreviews", `{"apiVersion":"authorization.k8s.io/v1","kind":"LocalSubjectAccessReview",
			"spec":{"user":"alice","resourceAttributes":{"namespace":"`+specNS+`","verb":"list","resource":"configmaps"}}}`)
	}
	servertest.Eventually(t, "alice's binding", func() bool {
		st, _ := lsar("a", "").Object()["status"].(map[string]any)
		return st["allowed"] == true
	})
	if st, _ := lsar("b", "").Object()["status"].(map[string]any); st["allowed"] == true {
		t.Errorf("LocalSubjectAccessReview in b allows alice: %v", st)
	}
	if r := lsar("a", "b"); r.Code != http.StatusBadRequest || r.Status().Message != "spec.resourceAttributes.namespace must match namespace: a" {
		t.Errorf("LocalSubjectAccessReview naming another namespace = %d %s", r.Code, r.Body)
	}
	carol := servertest.UserAPI(t, env, "carol")
	req, _ := http.NewRequest("GET", carol.Host+"/api/v1/namespaces/a/configmaps", nil)
	req.Header.Set("Impersonate-User", "carol")
	req.Header.Set("Impersonate-Group", "system:masters")
	resp, err := carol.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("carol impersonating system:masters = %d, want 403", resp.StatusCode)
	}
}
