package lifecycle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const svcs = "/api/v1/namespaces/default/services"

func svc(name, spec string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":%q},"spec":{%s}}`, name, spec)
}

const svcPorts = `"selector":{"app":"web"},"ports":[{"port":80}]`

func clusterIP(t *testing.T, r servertest.Response) string {
	t.Helper()
	ip, _ := servertest.Field(r.Object(), "spec.clusterIP").(string)
	return ip
}

// TestServices: cluster IPs are allocated from the range, requested ones
// honoured once, immutable, and freed on delete; headless services get
// none; what objwatch does not do is refused.
func TestServices(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	rng := netip.MustParsePrefix("10.0.0.0/24")

	// The API server's own service, as kube-apiserver creates it.
	k := a.JSON("GET", svcs+"/kubernetes", "")
	port := env.Config.Host[strings.LastIndex(env.Config.Host, ":")+1:]
	if k.Code != 200 || clusterIP(t, k) != "10.0.0.1" || fmt.Sprint(servertest.Field(k.Object(), "spec.ports")) != fmt.Sprintf("[map[name:https port:443 protocol:TCP targetPort:%s]]", port) {
		t.Fatalf("default/kubernetes = %d %s, want 10.0.0.1 port 443 → %s", k.Code, k.Body, port)
	}

	r := a.JSON("POST", svcs, svc("web", svcPorts))
	ip := clusterIP(t, r)
	if r.Code != http.StatusCreated || !rng.Contains(netip.MustParseAddr(ip)) || ip == "10.0.0.1" || ip == "10.0.0.0" || ip == "10.0.0.255" {
		t.Fatalf("create = %d %s, want a cluster IP in %s other than the network, broadcast and kubernetes addresses", r.Code, r.Body, rng)
	}
	servertest.CheckFields(t, "created service", r.Object(), map[string]any{
		"spec.clusterIPs": "[" + ip + "]", "spec.type": "ClusterIP", "spec.ipFamilies": "[IPv4]", "spec.ipFamilyPolicy": "SingleStack",
		"spec.sessionAffinity": "None", "spec.internalTrafficPolicy": "Cluster", "spec.ports": "[map[port:80 protocol:TCP targetPort:80]]",
	})
	if r := a.JSON("GET", svcs+"?fieldSelector=spec.clusterIP%3D"+ip, ""); !strings.Contains(string(r.Body), `"name":"web"`) {
		t.Errorf("field selector spec.clusterIP = %s", r.Body)
	}

	// Addresses the test asks for by name, never the one just allocated
	// at random.
	other := func(want string) string {
		if want == ip {
			return netip.MustParseAddr(want).Next().String()
		}
		return want
	}
	changed, fixed, sixty := other("10.0.0.77"), other("10.0.0.50"), other("10.0.0.60")

	// Immutable; an update that leaves it out keeps it.
	r = a.JSON("PUT", svcs+"/web", svc("web", `"clusterIP":"`+changed+`",`+svcPorts))
	if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, `spec.clusterIPs[0]: Invalid value: ["`+changed+`"]: may not change once set`) {
		t.Errorf("update of clusterIP = %d %s, want 422", r.Code, r.Body)
	}
	r = a.JSON("PUT", svcs+"/web", svc("web", `"selector":{"app":"web2"},"ports":[{"port":80}]`))
	if r.Code != 200 || clusterIP(t, r) != ip || servertest.Field(r.Object(), "spec.selector.app") != "web2" {
		t.Errorf("update without clusterIP = %d %s, want the selector changed and %s kept", r.Code, r.Body, ip)
	}

	// A requested IP: in range, once.
	if r := a.JSON("POST", svcs, svc("fixed", `"clusterIP":"`+fixed+`",`+svcPorts)); r.Code != http.StatusCreated || clusterIP(t, r) != fixed {
		t.Fatalf("create with clusterIP = %d %s", r.Code, r.Body)
	}
	for _, tc := range []struct{ ip, want string }{
		{fixed, "failed to allocate IP " + fixed + ": provided IP is already allocated"},
		{ip, "provided IP is already allocated"},
		{"10.1.0.5", `Service "other" is invalid: spec.clusterIPs: Invalid value: ["10.1.0.5"]: failed to allocate IP 10.1.0.5: the provided network does not match the current range`},
		{"10.0.0.255", "failed to allocate IP 10.0.0.255: the provided network does not match the current range"},
		{"10.0.0.1", "already allocated"},
	} {
		r := a.JSON("POST", svcs, svc("other", `"clusterIP":"`+tc.ip+`",`+svcPorts))
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, tc.want) {
			t.Errorf("create with clusterIP %s = %d %s, want 422 %q", tc.ip, r.Code, r.Body, tc.want)
		}
	}

	// A create that fails after the allocation frees it.
	if r := a.JSON("POST", svcs, svc("fixed", `"clusterIP":"`+sixty+`",`+svcPorts)); r.Code != http.StatusConflict {
		t.Fatalf("create of an existing name = %d %s, want 409", r.Code, r.Body)
	}
	if r := a.JSON("POST", svcs, svc("sixty", `"clusterIP":"`+sixty+`",`+svcPorts)); r.Code != http.StatusCreated {
		t.Errorf("%s after a failed create = %d %s, want it free", sixty, r.Code, r.Body)
	}

	// Freed on delete.
	if r := a.JSON("DELETE", svcs+"/fixed", ""); r.Code != 200 {
		t.Fatalf("delete = %d %s", r.Code, r.Body)
	}
	if r := a.JSON("POST", svcs, svc("again", `"clusterIP":"`+fixed+`",`+svcPorts)); r.Code != http.StatusCreated {
		t.Errorf("%s after its service was deleted = %d %s, want it free", fixed, r.Code, r.Body)
	}

	// Headless and ExternalName services get no cluster IP.
	if r := a.JSON("POST", svcs, svc("headless", `"clusterIP":"None","selector":{"app":"db"}`)); r.Code != http.StatusCreated || clusterIP(t, r) != "None" {
		t.Errorf("headless create = %d %s", r.Code, r.Body)
	}
	if r := a.JSON("POST", svcs, svc("ext", `"type":"ExternalName","externalName":"db.example.com"`)); r.Code != http.StatusCreated || clusterIP(t, r) != "" {
		t.Errorf("ExternalName create = %d %s", r.Code, r.Body)
	}

	for _, tc := range []struct{ name, spec, want string }{
		{"nodeport", `"type":"NodePort",` + svcPorts, "objwatch does not support NodePort services"},
		{"lb", `"type":"LoadBalancer",` + svcPorts, "objwatch does not support LoadBalancer services"},
		{"noports", `"selector":{"app":"x"}`, "spec.ports: Required value"},
		{"badport", `"ports":[{"port":70000}]`, "spec.ports[0].port: Invalid value"},
		{"unnamed", `"ports":[{"port":80},{"port":81}]`, "spec.ports[0].name: Required value"},
		{"dualstack", `"ipFamilies":["IPv4","IPv6"],` + svcPorts, "single-stack"},
		{"ipv6", `"clusterIP":"fd00::1",` + svcPorts, `spec.clusterIPs[0]: Invalid value: ["fd00::1"]: IPv6 is not configured on this cluster`},
	} {
		r := a.JSON("POST", svcs, svc(tc.name, tc.spec))
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Status().Message, tc.want) {
			t.Errorf("create %s = %d %s, want 422 %q", tc.name, r.Code, r.Body, tc.want)
		}
	}
}

// TestServiceIPsTwoServers: servers sharing an etcd never hand out one IP
// twice, however their creates interleave, and a full range is an error.
func TestServiceIPsTwoServers(t *testing.T) {
	endpoint := testenv.StartEtcd(t)
	small := testenv.WithServerConfig(func(c *server.Config) { c.ServiceClusterIPRange = "10.0.0.0/28" })
	envs := []*testenv.Env{testenv.Start(t, testenv.WithEtcd(endpoint), small), testenv.Start(t, testenv.WithEtcd(endpoint), small)}
	apis := []*servertest.API{servertest.NewAPI(t, envs[0]), servertest.NewAPI(t, envs[1])}
	// 14 usable addresses, the first the kubernetes service's: 13 left.
	const n = 13
	ips := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := apis[i%2].JSON("POST", svcs, svc(fmt.Sprintf("s%02d", i), svcPorts))
			if r.Code != http.StatusCreated {
				t.Errorf("create s%02d = %d %s", i, r.Code, r.Body)
				return
			}
			ips[i] = clusterIP(t, r)
		})
	}
	wg.Wait()
	seen := map[string]bool{"10.0.0.1": true}
	for i, ip := range ips {
		if seen[ip] {
			t.Errorf("s%02d got %s, already given out: %v", i, ip, ips)
		}
	}
	if r := apis[0].JSON("POST", svcs, svc("full", svcPorts)); r.Code != http.StatusInternalServerError || !strings.Contains(r.Status().Message, "range is full") {
		t.Errorf("create in a full range = %d %s, want 500 range is full", r.Code, r.Body)
	}
	// Deleting one through either server frees its IP for the other.
	if r := apis[1].JSON("DELETE", svcs+"/s00", ""); r.Code != 200 {
		t.Fatalf("delete = %d %s", r.Code, r.Body)
	}
	if r := apis[0].JSON("POST", svcs, svc("late", svcPorts)); r.Code != http.StatusCreated || clusterIP(t, r) != ips[0] {
		t.Errorf("create after a delete = %d %s, want %s", r.Code, r.Body, ips[0])
	}
}

// A dry-run create of a ClusterIP Service shows the cluster IP it would
// get and allocates nothing, as kube-apiserver v1.37.2 (its dry-run
// allocator): `kubectl create service clusterip web --tcp=80 --dry-run=server
// -o yaml` prints `clusterIP: 10.0.0.N` and `clusterIPs: [10.0.0.N]`, and
// that IP stays free. An IP asked for that another Service holds is
// refused in a dry run too.
func TestServiceDryRunShowsClusterIP(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.ServiceClusterIPRange = "10.0.0.0/29" }))
	a := servertest.NewAPI(t, env)
	rng := netip.MustParsePrefix("10.0.0.0/29")
	for i := range 20 { // more dry runs than the range has addresses: none allocates one
		r := a.JSON("POST", svcs+"?dryRun=All", svc("web", svcPorts))
		ip := clusterIP(t, r)
		if r.Code != http.StatusCreated || ip == "" || !rng.Contains(netip.MustParseAddr(ip)) || ip == "10.0.0.1" ||
			fmt.Sprint(servertest.Field(r.Object(), "spec.clusterIPs")) != "["+ip+"]" {
			t.Fatalf("dry run %d = %d %s, want a cluster IP of the range", i, r.Code, r.Body)
		}
	}
	servertest.MustCode(t, "the dry-run service", a.JSON("GET", svcs+"/web", ""), http.StatusNotFound)
	// Every usable address (6 less the kubernetes service's) can still be
	// allocated for real.
	var held string
	for i := range 5 {
		r := a.JSON("POST", svcs, svc(fmt.Sprint("real-", i), svcPorts))
		servertest.MustCode(t, "a real create after the dry runs", r, http.StatusCreated)
		held = clusterIP(t, r)
	}
	r := a.JSON("POST", svcs+"?dryRun=All", svc("taken", svcPorts+`,"clusterIP":"`+held+`"`))
	if st := r.Status(); r.Code != http.StatusUnprocessableEntity || !strings.Contains(st.Message, "failed to allocate IP "+held+": provided IP is already allocated") {
		t.Errorf("dry run asking for a held IP = %d %s", r.Code, r.Body)
	}
	if r := a.JSON("POST", svcs+"?dryRun=All", svc("full", svcPorts)); r.Code != http.StatusInternalServerError {
		t.Errorf("dry run with the range full = %d %s, want 500 range is full", r.Code, r.Body)
	}
}

// default/kubernetes deleted is recreated within seconds with the range's
// first address, as kube-apiserver v1.37.2's bootstrap controller does
// (every 10 s): `kubectl delete service kubernetes` then `kubectl get
// service kubernetes` shows it again, with a new uid and 10.0.0.1.
func TestKubernetesServiceRecreated(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	before := a.JSON("GET", svcs+"/kubernetes", "")
	servertest.MustCode(t, "default/kubernetes", before, http.StatusOK)
	servertest.MustCode(t, "delete default/kubernetes", a.JSON("DELETE", svcs+"/kubernetes", ""), http.StatusOK)
	var r servertest.Response
	servertest.Eventually(t, "default/kubernetes recreated", func() bool {
		r = a.JSON("GET", svcs+"/kubernetes", "")
		return r.Code == http.StatusOK
	})
	if clusterIP(t, r) != "10.0.0.1" || servertest.Field(r.Object(), "metadata.uid") == servertest.Field(before.Object(), "metadata.uid") {
		t.Errorf("recreated default/kubernetes = %s, want 10.0.0.1 and a new uid", r.Body)
	}
	// Its address is held again: asking for it is refused.
	r = a.JSON("POST", svcs, svc("thief", svcPorts+`,"clusterIP":"10.0.0.1"`))
	if r.Code != http.StatusUnprocessableEntity {
		t.Errorf("a service asking for 10.0.0.1 = %d %s, want 422", r.Code, r.Body)
	}
}

// A cluster IP's key left behind by a server that stopped between
// allocating it and storing its service (no service holds the IP) is taken
// over once it is older than 10 minutes, as Kubernetes' repair loop frees
// a leaked IP; a younger one is still refused.
func TestLeakedServiceIPTakenOver(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	raw := servertest.RawStore(t, env)
	leak := func(ip string, age time.Duration) {
		t.Helper()
		rec := fmt.Sprintf(`{"namespace":"default","name":"gone","uid":"0000-leaked","allocated":%q}`, time.Now().Add(-age).UTC().Format(time.RFC3339Nano))
		if _, err := raw.Create(context.Background(), "/registry/ranges/serviceips/"+ip, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	leak("10.0.0.50", 11*time.Minute)
	leak("10.0.0.51", 9*time.Minute)
	r := a.JSON("POST", svcs, svc("old-leak", svcPorts+`,"clusterIP":"10.0.0.50"`))
	if r.Code != http.StatusCreated || clusterIP(t, r) != "10.0.0.50" {
		t.Errorf("asking for an IP leaked 11 minutes ago = %d %s, want it", r.Code, r.Body)
	}
	kv, err := raw.Get(context.Background(), "/registry/ranges/serviceips/10.0.0.50")
	if err != nil || !strings.Contains(string(kv.Value), `"name":"old-leak"`) {
		t.Errorf("the taken-over key = %s %v, want it to name old-leak", kv.Value, err)
	}
	r = a.JSON("POST", svcs, svc("young-leak", svcPorts+`,"clusterIP":"10.0.0.51"`))
	if st := r.Status(); r.Code != http.StatusUnprocessableEntity || !strings.Contains(st.Message, "provided IP is already allocated") {
		t.Errorf("asking for an IP leaked 9 minutes ago = %d %s, want 422 already allocated", r.Code, r.Body)
	}
}
