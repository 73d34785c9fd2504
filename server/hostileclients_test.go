package server_test

import (
	"bufio"
	"context"
	"crypto/tls"

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
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

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
	admin := servertest.NewAPI(t, env)
	users := servertest.Writers(t, env, admin, "flood", "calm")
	flood, calm := users[0], users[1]
	floodTLS := servertest.UserTLS(t, env, "flood")

	start := time.Now()
	slow := []*tls.Conn{servertest.SlowCreate(t, env, floodTLS, "slow-0"), servertest.SlowCreate(t, env, floodTLS, "slow-1")}
	// The slow creates hold flood's two slots once the server has read
	// their headers. Nothing else of flood's may run meanwhile: a create
	// holding a slot then would have one slow create refused, and a
	// refused request with an unread body is answered only once its body
	// is read (net/http discards it first), which here never happens.
	const held = `apiserver_current_inflight_requests{request_kind="mutating"} `
	for servertest.MetricValue(admin, held) < 2 {
		if time.Since(start) > timeout/2 {
			t.Fatalf("the slow creates hold %d mutating slots, want 2", servertest.MetricValue(admin, held))
		}
		time.Sleep(10 * time.Millisecond)
	}
	const refusedName = "extra"
	refused := flood.JSON("POST", servertest.CMs, servertest.CM(refusedName, ""))
	if s := refused.Status(); refused.Code != http.StatusTooManyRequests || s.Reason != "TooManyRequests" ||
		s.Message != "Too many requests, please try again later." || refused.Header.Get("Retry-After") != "1" ||
		s.Details == nil || s.Details.RetryAfterSeconds != 1 {
		t.Fatalf("flood beyond its share = %d %s (Retry-After %q), want Kubernetes' 429",
			refused.Code, refused.Body, refused.Header.Get("Retry-After"))
	}
	servertest.MustCode(t, "calm's create while flood holds its share", calm.JSON("POST", servertest.CMs, servertest.CM("calm-0", "")), http.StatusCreated)
	servertest.MustCode(t, "admin's create (system:masters)", admin.JSON("POST", servertest.CMs, servertest.CM("admin-0", "")), http.StatusCreated)
	servertest.MustCode(t, "the refused object", admin.JSON("GET", servertest.CMs+"/"+refusedName, ""), http.StatusNotFound)

	for i, conn := range slow {
		resp, s := readResponse(t, conn, 2*timeout)
		if resp.StatusCode != http.StatusGatewayTimeout || s.Reason != metav1.StatusReasonTimeout {
			t.Errorf("slow create %d = %d %+v, want 504 Timeout", i, resp.StatusCode, s)
		}
		servertest.MustCode(t, "the slow object", admin.JSON("GET", fmt.Sprintf("%s/slow-%d", servertest.CMs, i), ""), http.StatusNotFound)
	}
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Errorf("slow bodies cut off after %v, want about %v", d, timeout)
	}
	servertest.MustCode(t, "flood's create after its slow ones ended", flood.JSON("POST", servertest.CMs, servertest.CM("flood-after", "")), http.StatusCreated)
}

// TestSlowHeadersClosed: a client that sends its request headers a byte
// at a time (slow-loris) has its connection closed after the header
// timeout, without an answer.
func TestSlowHeadersClosed(t *testing.T) {
	env := testenv.Start(t, func(o *instance.Options) { o.ReadHeaderTimeout = time.Second })
	conn, err := tls.Dial("tcp", strings.TrimPrefix(env.Config.Host, "https://"), servertest.UserTLS(t, env, "loris"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", servertest.CMs)
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
			// The server's timer starts at its accept, a little before
			// start: allow for it.
			if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
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
	admin := servertest.NewAPI(t, env)
	pr, pw := io.Pipe()
	defer pw.Close()
	body := servertest.CM("slow", "")
	go func() {
		pw.Write([]byte(body[:len(body)/2])) // and then nothing, until the test ends
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", env.Config.Host+servertest.CMs, pr)
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
	servertest.MustCode(t, "the slow object", admin.JSON("GET", servertest.CMs+"/slow", ""), http.StatusNotFound)
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
	a := servertest.NewAPI(t, env)
	target := a.Must("POST", servertest.CMs, servertest.CM("target", ""))
	rv := servertest.RVOf(t, target)

	ok := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deepest"},"extra":%s}`, nested(9999, "1"))
	servertest.MustCode(t, "a create 10,000 levels deep", a.JSON("POST", servertest.CMs, ok), http.StatusCreated)

	deep := nested(10001, "1") // with the object around it: 10,002 levels
	// and 10,001 arrays, as many flow levels in YAML
	for _, tc := range []struct {
		name, method, path, ct, body, want string
	}{
		{"JSON create", "POST", servertest.CMs, "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"extra":` + deep + `}`, "exceeded max depth"},
		{"JSON create, 10,001 levels", "POST", servertest.CMs, "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"extra":` + nested(10000, "1") + `}`, "exceeded max depth"},
		{"JSON update", "PUT", servertest.CMs + "/target", "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":{"k":"changed"},"extra":` + deep + `}`, "exceeded max depth"},
		{"YAML create", "POST", servertest.CMs, "application/yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\nextra: " + deep + "\n", "exceeded max depth of 10000"},
		{"merge patch", "PATCH", servertest.CMs + "/target", "application/merge-patch+json", `{"data":{"k":"changed"},"extra":` + deep + `}`, "invalid JSON patch"},
		{"strategic merge patch", "PATCH", servertest.CMs + "/target", "application/strategic-merge-patch+json", `{"data":{"k":"changed"},"extra":` + deep + `}`, "invalid JSON patch"},
		{"JSON patch", "PATCH", servertest.CMs + "/target", "application/json-patch+json",
			`[{"op":"replace","path":"/data/k","value":"changed"},{"op":"add","path":"/extra","value":` + deep + `}]`, "invalid JSON patch"},
		{"a JSON patch doubling its depth", "PATCH", servertest.CMs + "/target", "application/json-patch+json", doublingPatch(), "exceeded max depth"},
		{"apply", "PATCH", servertest.CMs + "/target?fieldManager=m&force=true", "application/apply-patch+yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: target\ndata:\n  k: changed\nextra: " + deep + "\n", "exceeded max depth of 10000"},
		{"protobuf CRD", "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/vnd.kubernetes.protobuf",
			string(deepCRD(20000)), "exceeded max depth of 10000"},
	} {
		r := a.Do(tc.method, tc.path, tc.ct, []byte(tc.body))
		if s := r.Status(); r.Code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || !strings.Contains(s.Message, tc.want) {
			t.Errorf("%s = %d %s, want 400 BadRequest with %q", tc.name, r.Code, servertest.Truncate(r.Body), tc.want)
		}
	}
	// Each copy doubles the array: 2^25 KiB without kube-apiserver's
	// bound on what copies add (the request size limit).
	boom := []string{`{"op":"add","path":"/extra","value":["` + strings.Repeat("a", 1024) + `"]}`}
	for range 25 {
		boom = append(boom, `{"op":"copy","from":"/extra","path":"/extra/-"}`)
	}
	r := a.Do("PATCH", servertest.CMs+"/target", "application/json-patch+json", []byte("["+strings.Join(boom, ",")+"]"))
	if s := r.Status(); r.Code != http.StatusUnprocessableEntity || !strings.Contains(s.Message, "exceeding the limit") {
		t.Errorf("a JSON patch doubling its size 25 times = %d %s, want 422", r.Code, servertest.Truncate(r.Body))
	}
	servertest.MustCode(t, "the refused create", a.JSON("GET", servertest.CMs+"/deep", ""), http.StatusNotFound)
	servertest.MustCode(t, "the refused CRD", a.JSON("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deep.example.com", ""), http.StatusNotFound)
	after := a.Must("GET", servertest.CMs+"/target", "")
	if got := servertest.RVOf(t, after); got != rv || !strings.Contains(string(after.Body), `"k":"v"`) {
		t.Errorf("target after the refused writes: %s, want resourceVersion %s unchanged", after.Body, rv)
	}
}

// TestRootJSONPatchWithoutValue: a JSON patch testing or replacing the
// whole object without a value, on which the JSON patch library panics
// (as kube-apiserver v1.37.2 does, found by FuzzPatch), is a 422 and
// changes nothing.
func TestRootJSONPatchWithoutValue(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	rv := servertest.RVOf(t, a.Must("POST", servertest.CMs, servertest.CM("target", "")))
	for _, body := range []string{`[{"op":"test","path":""}]`, `[{"op":"replace","path":""}]`, `[{"op":"test","path":"","value":null}]`} {
		r := a.Do("PATCH", servertest.CMs+"/target", "application/json-patch+json", []byte(body))
		if s := r.Status(); r.Code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid {
			t.Errorf("PATCH %s = %d %s, want 422", body, r.Code, servertest.Truncate(r.Body))
		}
	}
	if got := servertest.RVOf(t, a.Must("GET", servertest.CMs+"/target", "")); got != rv {
		t.Errorf("target's resourceVersion %s after the refused patches, want %s", got, rv)
	}
}
