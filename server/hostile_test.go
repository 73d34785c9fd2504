package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

// writers lets the users named create ConfigMaps in default.
func writers(t *testing.T, env *testenv.Env, admin *api, users ...string) []*api {
	t.Helper()
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-writer"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","update","patch","delete"]}]}`)
	var subjects []string
	for _, u := range users {
		subjects = append(subjects, fmt.Sprintf(`{"kind":"User","name":%q}`, u))
	}
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-writers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-writer"},
		"subjects":[`+strings.Join(subjects, ",")+`]}`)
	var out []*api
	for _, u := range users {
		a := userAPI(t, env, u)
		eventually(t, u+"'s binding", func() bool { return a.json("GET", cms, "").code == http.StatusOK })
		out = append(out, a)
	}
	return out
}

// userTLS is the HTTP/1.1 TLS client config of user name.
func userTLS(t testing.TB, env *testenv.Env, name string) *tls.Config {
	t.Helper()
	c := env.User(t, name)
	pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}, ServerName: "127.0.0.1"}
}

// slowCreate sends, as the user of cfg, the headers of a ConfigMap create
// and the first half of its body, and then nothing: a client whose body
// trickles in.
func slowCreate(t *testing.T, env *testenv.Env, cfg *tls.Config, name string) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(env.Config.Host, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := cm(name, "")
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		cms, len(body), body[:len(body)/2])
	return conn
}

// readResponse reads the one response on conn and checks that the server
// closes the connection after it.
func readResponse(t *testing.T, conn *tls.Conn, within time.Duration) (*http.Response, metav1.Status) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", within, err)
	}
	b, _ := io.ReadAll(resp.Body)
	var s metav1.Status
	json.Unmarshal(b, &s)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection still open after the response (%v)", err)
	}
	return resp, s
}

// TestUserInFlightShare: a user holding its share of the mutating limit
// gets Kubernetes' 429 with Retry-After while another user is still
// served, and nothing of the refused request is stored; the held slots
// are bodies that trickle in, which the server cuts off at the request
// timeout (504, connection closed), giving their slots back.
func TestUserInFlightShare(t *testing.T) {
	// Long enough that, on a loaded machine (CI runs it with -race), the
	// server has read the slow creates' headers well before it cuts
	// their bodies off.
	const timeout = 3 * time.Second
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.MaxMutatingInFlight, c.UserInFlightShare, c.RequestTimeout = 4, 0.5, timeout
	}))
	admin := newAPI(t, env)
	users := writers(t, env, admin, "flood", "calm")
	flood, calm := users[0], users[1]
	floodTLS := userTLS(t, env, "flood")

	start := time.Now()
	slow := []*tls.Conn{slowCreate(t, env, floodTLS, "slow-0"), slowCreate(t, env, floodTLS, "slow-1")}
	// The slow creates hold flood's two slots once the server has read
	// their headers. Nothing else of flood's may run meanwhile: a create
	// holding a slot then would have one slow create refused, and a
	// refused request with an unread body is answered only once its body
	// is read (net/http discards it first), which here never happens.
	const held = `apiserver_current_inflight_requests{request_kind="mutating"} `
	for metricValue(admin, held) < 2 {
		if time.Since(start) > timeout/2 {
			t.Fatalf("the slow creates hold %d mutating slots, want 2", metricValue(admin, held))
		}
		time.Sleep(10 * time.Millisecond)
	}
	const refusedName = "extra"
	refused := flood.json("POST", cms, cm(refusedName, ""))
	if s := refused.status(); refused.code != http.StatusTooManyRequests || s.Reason != "TooManyRequests" ||
		s.Message != "Too many requests, please try again later." || refused.header.Get("Retry-After") != "1" ||
		s.Details == nil || s.Details.RetryAfterSeconds != 1 {
		t.Fatalf("flood beyond its share = %d %s (Retry-After %q), want Kubernetes' 429",
			refused.code, refused.body, refused.header.Get("Retry-After"))
	}
	mustCode(t, "calm's create while flood holds its share", calm.json("POST", cms, cm("calm-0", "")), http.StatusCreated)
	mustCode(t, "admin's create (system:masters)", admin.json("POST", cms, cm("admin-0", "")), http.StatusCreated)
	mustCode(t, "the refused object", admin.json("GET", cms+"/"+refusedName, ""), http.StatusNotFound)

	for i, conn := range slow {
		resp, s := readResponse(t, conn, 2*timeout)
		if resp.StatusCode != http.StatusGatewayTimeout || s.Reason != metav1.StatusReasonTimeout {
			t.Errorf("slow create %d = %d %+v, want 504 Timeout", i, resp.StatusCode, s)
		}
		mustCode(t, "the slow object", admin.json("GET", fmt.Sprintf("%s/slow-%d", cms, i), ""), http.StatusNotFound)
	}
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Errorf("slow bodies cut off after %v, want about %v", d, timeout)
	}
	mustCode(t, "flood's create after its slow ones ended", flood.json("POST", cms, cm("flood-after", "")), http.StatusCreated)
}

// TestSlowHeadersClosed: a client that sends its request headers a byte
// at a time (slow-loris) has its connection closed after the header
// timeout, without an answer.
func TestSlowHeadersClosed(t *testing.T) {
	env := testenv.Start(t, func(o *instance.Options) { o.ReadHeaderTimeout = time.Second })
	conn, err := tls.Dial("tcp", strings.TrimPrefix(env.Config.Host, "https://"), userTLS(t, env, "loris"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", cms)
	closed := make(chan error, 1)
	go func() {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 200)
		n, err := conn.Read(buf)
		if n > 0 {
			err = fmt.Errorf("the server answered %q", buf[:n])
		}
		closed <- err
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-closed:
			if err != io.EOF {
				t.Fatalf("connection: %v, want closed by the server", err)
			}
			if d := time.Since(start); d < time.Second || d > 3*time.Second {
				t.Errorf("closed after %v, want the 1 s header timeout", d)
			}
			return
		case <-tick.C:
			conn.Write([]byte("a")) // a header that never ends
		}
	}
}

// TestSlowBodyHTTP2: over HTTP/2 too, a body still arriving at the
// request timeout is cut off with 504 and nothing is stored.
func TestSlowBodyHTTP2(t *testing.T) {
	const timeout = 2 * time.Second
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.RequestTimeout = timeout }))
	admin := newAPI(t, env)
	pr, pw := io.Pipe()
	defer pw.Close()
	body := cm("slow", "")
	go func() {
		pw.Write([]byte(body[:len(body)/2])) // and then nothing, until the test ends
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", env.Config.Host+cms, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := env.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("slow HTTP/%d create = %d %s, want 504", resp.ProtoMajor, resp.StatusCode, b)
	}
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Errorf("answered after %v, want about %v", d, timeout)
	}
	mustCode(t, "the slow object", admin.json("GET", cms+"/slow", ""), http.StatusNotFound)
}

// nested is v inside n arrays.
func nested(n int, v string) string {
	return strings.Repeat("[", n) + v + strings.Repeat("]", n)
}

// doublingPatch is a JSON patch 5,003 levels deep that changes the
// target's data, adds an array 5,000 levels deep and copies it into its
// own innermost array: a result over 10,000 levels deep.
func doublingPatch() string {
	return `[{"op":"replace","path":"/data/k","value":"changed"},{"op":"add","path":"/extra","value":` + nested(5000, "0") +
		`},{"op":"copy","from":"/extra","path":"/extra` + strings.Repeat("/0", 5000) + `"}]`
}

// deepCRD is a protobuf-encoded CustomResourceDefinition whose schema is
// levels JSONSchemaProps deep (each the "not" of the one around it),
// built from the inside out in reverse so that it takes linear time.
func deepCRD(levels int) []byte {
	// rev is the encoding, last byte first.
	var rev []byte
	field := func(num protowire.Number, start int) { // wrap rev[start:] as field num
		n := len(rev) - start
		for _, b := range slices.Backward(protowire.AppendVarint(nil, uint64(n))) {
			rev = append(rev, b)
		}
		for _, b := range slices.Backward(protowire.AppendTag(nil, num, protowire.BytesType)) {
			rev = append(rev, b)
		}
	}
	str := func(num protowire.Number, s string) {
		start := len(rev)
		for i := len(s) - 1; i >= 0; i-- {
			rev = append(rev, s[i])
		}
		field(num, start)
	}
	for range levels {
		field(28, 0) // JSONSchemaProps.not
	}
	field(1, 0)  // CustomResourceValidation.openAPIV3Schema
	field(4, 0)  // CustomResourceDefinitionVersion.schema
	str(1, "v1") // .name
	field(7, 0)  // CustomResourceDefinitionSpec.versions
	field(2, 0)  // CustomResourceDefinition.spec
	md := len(rev)
	str(1, "deep.example.com") // ObjectMeta.name
	field(1, md)               // CustomResourceDefinition.metadata
	field(2, 0)                // runtime.Unknown.raw
	tm := len(rev)
	str(2, "CustomResourceDefinition") // TypeMeta.kind
	str(1, "apiextensions.k8s.io/v1")  // TypeMeta.apiVersion
	field(1, tm)                       // runtime.Unknown.typeMeta
	slices.Reverse(rev)
	return append([]byte("k8s\x00"), rev...)
}

// TestDeeplyNestedBodies: bodies nested deeper than Kubernetes decodes
// (10,000 levels) are refused with a 400 Status, as kube-apiserver refuses
// them, whatever their encoding (JSON, YAML, protobuf) or patch type, and
// nothing is stored or changed; 10,000 levels are accepted.
func TestDeeplyNestedBodies(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	target := a.must("POST", cms, cm("target", ""))
	rv := rvOf(t, target)

	ok := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deepest"},"extra":%s}`, nested(9999, "1"))
	mustCode(t, "a create 10,000 levels deep", a.json("POST", cms, ok), http.StatusCreated)

	deep := nested(10001, "1") // with the object around it: 10,002 levels
	// and 10,001 arrays, as many flow levels in YAML
	for _, tc := range []struct {
		name, method, path, ct, body, want string
	}{
		{"JSON create", "POST", cms, "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"extra":` + deep + `}`, "exceeded max depth"},
		{"JSON create, 10,001 levels", "POST", cms, "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"extra":` + nested(10000, "1") + `}`, "exceeded max depth"},
		{"JSON update", "PUT", cms + "/target", "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":{"k":"changed"},"extra":` + deep + `}`, "exceeded max depth"},
		{"YAML create", "POST", cms, "application/yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\nextra: " + deep + "\n", "exceeded max depth of 10000"},
		{"merge patch", "PATCH", cms + "/target", "application/merge-patch+json", `{"data":{"k":"changed"},"extra":` + deep + `}`, "invalid JSON patch"},
		{"strategic merge patch", "PATCH", cms + "/target", "application/strategic-merge-patch+json", `{"data":{"k":"changed"},"extra":` + deep + `}`, "invalid JSON patch"},
		{"JSON patch", "PATCH", cms + "/target", "application/json-patch+json",
			`[{"op":"replace","path":"/data/k","value":"changed"},{"op":"add","path":"/extra","value":` + deep + `}]`, "invalid JSON patch"},
		{"a JSON patch doubling its depth", "PATCH", cms + "/target", "application/json-patch+json", doublingPatch(), "exceeded max depth"},
		{"apply", "PATCH", cms + "/target?fieldManager=m&force=true", "application/apply-patch+yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: target\ndata:\n  k: changed\nextra: " + deep + "\n", "exceeded max depth of 10000"},
		{"protobuf CRD", "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/vnd.kubernetes.protobuf",
			string(deepCRD(20000)), "exceeded max depth of 10000"},
	} {
		r := a.do(tc.method, tc.path, tc.ct, []byte(tc.body))
		if s := r.status(); r.code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || !strings.Contains(s.Message, tc.want) {
			t.Errorf("%s = %d %s, want 400 BadRequest with %q", tc.name, r.code, truncate(r.body), tc.want)
		}
	}
	// Each copy doubles the array: 2^25 KiB without kube-apiserver's
	// bound on what copies add (the request size limit).
	boom := []string{`{"op":"add","path":"/extra","value":["` + strings.Repeat("a", 1024) + `"]}`}
	for range 25 {
		boom = append(boom, `{"op":"copy","from":"/extra","path":"/extra/-"}`)
	}
	r := a.do("PATCH", cms+"/target", "application/json-patch+json", []byte("["+strings.Join(boom, ",")+"]"))
	if s := r.status(); r.code != http.StatusUnprocessableEntity || !strings.Contains(s.Message, "exceeding the limit") {
		t.Errorf("a JSON patch doubling its size 25 times = %d %s, want 422", r.code, truncate(r.body))
	}
	mustCode(t, "the refused create", a.json("GET", cms+"/deep", ""), http.StatusNotFound)
	mustCode(t, "the refused CRD", a.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deep.example.com", ""), http.StatusNotFound)
	after := a.must("GET", cms+"/target", "")
	if got := rvOf(t, after); got != rv || !strings.Contains(string(after.body), `"k":"v"`) {
		t.Errorf("target after the refused writes: %s, want resourceVersion %s unchanged", after.body, rv)
	}
}

// TestRootJSONPatchWithoutValue: a JSON patch testing or replacing the
// whole object without a value, on which the JSON patch library panics
// (as kube-apiserver v1.37.2 does, found by FuzzPatch), is a 422 and
// changes nothing.
func TestRootJSONPatchWithoutValue(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	rv := rvOf(t, a.must("POST", cms, cm("target", "")))
	for _, body := range []string{`[{"op":"test","path":""}]`, `[{"op":"replace","path":""}]`, `[{"op":"test","path":"","value":null}]`} {
		r := a.do("PATCH", cms+"/target", "application/json-patch+json", []byte(body))
		if s := r.status(); r.code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid {
			t.Errorf("PATCH %s = %d %s, want 422", body, r.code, truncate(r.body))
		}
	}
	if got := rvOf(t, a.must("GET", cms+"/target", "")); got != rv {
		t.Errorf("target's resourceVersion %s after the refused patches, want %s", got, rv)
	}
}
