package informer_test

import (
	"crypto/rand"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// kubeREST returns a REST for a user (admin or alice) of a real
// kube-apiserver run beside the tests, whose kubeconfigs are in
// $KAS_DIR/run/USER.kubeconfig (default $TMPDIR/kube-apiserver-ref), or
// skips the test when none runs.
func kubeREST(t *testing.T, user string) *client.REST {
	t.Helper()
	dir := os.Getenv("KAS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kube-apiserver-ref")
	}
	cfg, err := client.FromKubeconfig(filepath.Join(dir, "run", user+".kubeconfig"), "")
	if err != nil {
		t.Skipf("no reference kube-apiserver kubeconfig: %v", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Skipf("reference kubeconfig host %q: %v", cfg.Host, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		t.Skipf("reference kube-apiserver not running: %v", err)
	}
	conn.Close()
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

// TestTenantKube: against Kubernetes itself, alice's informer over a
// namespace she may read and one she may not is refused in the second,
// with Kubernetes' message, and syncs once she is granted it.
func TestTenantKube(t *testing.T) {
	admin := kubeREST(t, "admin")
	alice := kubeREST(t, "alice")
	ctx := testContext(t, 60*time.Second)
	if who, err := alice.WhoAmI(ctx); err != nil || who.Username != "alice" {
		t.Fatalf("WhoAmI() as alice = %+v, %v", who, err)
	}
	// Namespaces are not deleted: the kit runs no namespace controller.
	prefix := "ow-tenant-" + strings.ToLower(rand.Text()[:6])
	a, b := prefix+"-a", prefix+"-b"
	tn := startTenancy(t, admin, "alice", a, b)
	tn.grant(t, a)
	cms := client.NewClient[CM](admin, configMaps)
	createCM(t, cms, a, "one")
	createCM(t, cms, b, "one")
	waitAllowed(t, alice, a)
	if ok, _, err := alice.CanI(ctx, authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: b}); err != nil || ok {
		t.Errorf("CanI(list configmaps in b) = %v, %v; want false", ok, err)
	}
	if st, err := alice.Rules(ctx, a); err != nil || !slices.ContainsFunc(st.ResourceRules, func(r authorizationv1.ResourceRule) bool {
		return slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, "watch")
	}) {
		t.Errorf("Rules(a) = %+v, %v; want watch configmaps", st, err)
	}

	inf, err := informer.New(client.NewClient[CM](alice, configMaps), informer.Options[CM]{
		Namespaces:     []string{a, b},
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	err = inf.WaitForSyncOrRefusal(ctx)
	var refused *informer.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, client.ErrForbidden) || refused.Namespace != b {
		t.Fatalf("WaitSynced() = %v, want b refused", err)
	}
	t.Logf("refusal: %v", err)
	if want := `User "alice" cannot ` + refused.Verb + ` resource "configmaps" in API group "" in the namespace "` + b + `"`; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q, want Kubernetes' %q", err, want)
	}
	tn.grant(t, b)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatalf("no sync after access to b was granted: %v (last error %v)", err, inf.LastError())
	}
	if got, want := listerKeys(inf.Lister()), []string{a + "/one", b + "/one"}; !slices.Equal(got, want) {
		t.Errorf("Lister = %v, want %v", got, want)
	}
	if err := inf.LastError(); err != nil {
		t.Errorf("LastError() once granted = %v", err)
	}

	all, err := informer.New(client.NewClient[CM](alice, configMaps), informer.Options[CM]{DisableStreamingList: true})
	if err != nil {
		t.Fatal(err)
	}
	run(t, all)
	err = all.WaitForSyncOrRefusal(ctx)
	want := `informer configmaps: list configmaps at the cluster scope refused: configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope`
	if !errors.As(err, &refused) || err.Error() != want {
		t.Errorf("WaitSynced() of a cluster-wide informer = %v, want %s", err, want)
	}
}
