package audit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/objects"
)

// ServerUser is the user of the server's own writes (objects.Request.User
// nil) that name no Actor: kube-apiserver's loopback user.
var ServerUser = auth.User{Name: "system:apiserver", Groups: []string{"system:masters", "system:authenticated"}}

// Record is one request's audit event while the request is served. The
// HTTP layer makes it (Log.Begin), puts it in the request's context
// (WithRecord) and writes its stages; the object service's Written hook
// (Log.Written) finds it there and attaches the write's diff. A Record is
// safe for concurrent use.
type Record struct {
	log      *Log
	decision Decision

	mu    sync.Mutex // guards ev, wrote, write and reason
	ev    auditv1.Event
	wrote bool
	// write is the request's first write's annotations, for its last
	// stage: its diff and resourceVersion (record.diff).
	write *written
	// reason is the authorizer's account of its last decision on the
	// request (authorization.k8s.io/reason).
	reason string
}

// Authorized records the authorizer's reason for its decision on the
// request (RBAC's "RBAC: allowed by ClusterRoleBinding ..."), kept in the
// record's authorization.k8s.io/reason annotation; without it the
// annotation is empty, as kube-apiserver's is for system:masters and most
// refusals.
func (r *Record) Authorized(reason string) {
	r.mu.Lock()
	r.reason = reason
	r.mu.Unlock()
}

// Request is what Begin records of an HTTP request.
type Request struct {
	HTTP     *http.Request
	Received time.Time
	// User is the authenticated user; Impersonator, when set, the user who
	// sent the request as User.
	User, Impersonator *auth.User
	Attributes         Attributes
}

// Begin decides the request's level and returns its record; nil when the
// policy records nothing of it (level None).
func (l *Log) Begin(r Request) *Record {
	d := l.policy.Evaluate(r.Attributes)
	if d.Level == auditv1.LevelNone || d.Level == "" {
		return nil
	}
	id := r.HTTP.Header.Get("Audit-ID")
	if id == "" {
		id = newUID()
	}
	ev := auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"},
		Level:                    d.Level,
		AuditID:                  types.UID(id),
		RequestURI:               r.HTTP.URL.RequestURI(),
		Verb:                     r.Attributes.Verb,
		SourceIPs:                sourceIPs(r.HTTP),
		UserAgent:                r.HTTP.UserAgent(),
		RequestReceivedTimestamp: metav1.NewMicroTime(r.Received),
	}
	if r.User != nil {
		ev.User = userInfo(*r.User)
	}
	if r.Impersonator != nil {
		u := ev.User
		ev.User, ev.ImpersonatedUser = userInfo(*r.Impersonator), &u
	}
	if a := r.Attributes; a.ResourceRequest {
		ev.ObjectRef = &auditv1.ObjectReference{
			Resource: a.Resource, Namespace: a.Namespace, Name: a.Name,
			APIGroup: a.APIGroup, APIVersion: a.APIVersion, Subresource: a.Subresource,
		}
	}
	return &Record{log: l, decision: d, ev: ev}
}

// AuditID is the record's audit ID (the Audit-ID response header).
func (r *Record) AuditID() string { return string(r.ev.AuditID) }

// Level is the record's level.
func (r *Record) Level() auditv1.Level { return r.decision.Level }

// WantsRequest reports whether the request body is recorded; WantsResponse
// the response body.
func (r *Record) WantsRequest() bool  { return r.decision.atLeast(auditv1.LevelRequest) }
func (r *Record) WantsResponse() bool { return r.decision.atLeast(auditv1.LevelRequestResponse) }

type recordKey struct{}

// WithRecord returns ctx carrying r for the Written hook.
func WithRecord(ctx context.Context, r *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, r)
}

// RecordFrom returns the record in ctx, if any.
func RecordFrom(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// AddAnnotation adds an annotation to the record, as admission plugins
// add theirs in kube-apiserver (admission.Attributes.AddAnnotation): the
// stages written after it carry it. A key already set keeps its first
// value, and false is returned.
func (r *Record) AddAnnotation(key, value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ev.Annotations[key]; ok {
		return false
	}
	r.ev.Annotations = withAnnotations(r.ev.Annotations, key, value)
	return true
}

// Stage writes the record at stage (RequestReceived, ResponseStarted)
// without waiting for it to reach the disk.
func (r *Record) Stage(stage auditv1.Stage) {
	if r.decision.omits(stage) {
		return
	}
	r.mu.Lock()
	ev := r.ev
	r.mu.Unlock()
	ev.Stage, ev.StageTimestamp = stage, metav1.NewMicroTime(time.Now())
	if stage == auditv1.StageRequestReceived {
		ev.StageTimestamp = ev.RequestReceivedTimestamp
	}
	r.log.append(&ev, nil, false)
}

// Unauthenticated writes the record of a request no authenticator
// recognised, as kube-apiserver does: one record, at stage
// ResponseStarted, with no user and a 401 whose message names the
// credentials that were tried (AuthenticationFailure).
func (r *Record) Unauthenticated(h *http.Request) {
	if r.decision.omits(auditv1.StageResponseStarted) {
		return
	}
	ev := r.ev
	ev.Stage, ev.StageTimestamp = auditv1.StageResponseStarted, metav1.NewMicroTime(time.Now())
	ev.ResponseStatus = &metav1.Status{Code: http.StatusUnauthorized, Message: AuthenticationFailure(h)}
	r.log.append(&ev, nil, false)
}

// AuthenticationFailure is kube-apiserver's account of a request's failed
// authentication: the kinds of credentials it carried.
func AuthenticationFailure(h *http.Request) string {
	var tried []string
	if _, _, ok := h.BasicAuth(); ok {
		tried = append(tried, "basic")
	}
	if f := strings.Fields(h.Header.Get("Authorization")); len(f) > 1 && strings.EqualFold(f[0], "bearer") {
		tried = append(tried, "bearer")
	}
	if strings.TrimSpace(h.URL.Query().Get("access_token")) != "" {
		tried = append(tried, "access_token")
	}
	if h.TLS != nil && len(h.TLS.PeerCertificates) > 0 {
		tried = append(tried, "x509")
	}
	if len(tried) == 0 {
		return "Authentication failed, no credentials provided"
	}
	return "Authentication failed, attempted: " + strings.Join(tried, ", ")
}

// Response is how a request ended, for its ResponseComplete or Panic
// stage.
type Response struct {
	Code int
	// RequestBody and ResponseBody are recorded per the level when they
	// are JSON; ResponseBody is also read for an error's Status.
	RequestBody, ResponseBody []byte
	// Mutating: a create, update, patch or delete; one that succeeded and
	// wrote nothing records an empty diff. DryRun: nothing was to be
	// written.
	Mutating, DryRun bool
	// Panic is the value a handler panicked with (the Panic stage).
	Panic any
}

// Complete writes the record's last stage and, when wait is set, returns
// once it is on disk (or why not). A request whose response is sent only
// after Complete returned is acknowledged with its record durable.
func (r *Record) Complete(resp Response, wait bool) error {
	stage := auditv1.StageResponseComplete
	if resp.Panic != nil {
		stage = auditv1.StagePanic
	}
	if r.decision.omits(stage) {
		return nil
	}
	r.mu.Lock()
	ev := r.ev
	wrote, reason, write := r.wrote, r.reason, r.write
	r.write = nil // this stage is its last use: its buffer is reused after it
	r.mu.Unlock()
	ev.Stage, ev.StageTimestamp = stage, metav1.NewMicroTime(time.Now())
	ev.ResponseStatus = responseStatus(resp)
	var buf [10]string
	extra := buf[:0]
	if ev.ObjectRef != nil && resp.Panic == nil {
		// As kube-apiserver records them; objwatch authorizes in the
		// object service, so a 403 is the refusal.
		decision := "allow"
		if resp.Code == http.StatusForbidden {
			decision = "forbid"
		}
		extra = append(extra, "authorization.k8s.io/decision", decision, "authorization.k8s.io/reason", reason)
	}
	switch {
	case write != nil:
		extra = write.annotations(extra)
		defer write.release()
	case resp.Mutating && !wrote && !resp.DryRun && resp.Code/100 == 2 && resp.Panic == nil:
		extra = append(extra, PatchAnnotation, "[]", ChangedPathsAnnotation, "[]")
		if rv := responseRV(resp.ResponseBody); rv != "" {
			extra = append(extra, ResourceVersionAnnotation, rv)
		}
	}
	if r.WantsRequest() && resp.Mutating {
		ev.RequestObject = r.object(resp.RequestBody)
	}
	if r.WantsResponse() && resp.Code/100 == 2 {
		ev.ResponseObject = r.object(resp.ResponseBody)
	}
	b := r.log.append(&ev, extra, wait)
	if !wait {
		return nil
	}
	start := time.Now()
	err := b.Wait()
	r.log.waitSeconds.Observe(time.Since(start).Seconds())
	return err
}

// object is body as a recorded object: JSON only, without managedFields
// when the policy says so.
func (r *Record) object(body []byte) *runtime.Unknown {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil
	}
	if r.decision.OmitManagedFields && bytes.Contains(body, []byte(`"managedFields"`)) {
		if out, ok := omitManagedFields(body); ok {
			return &runtime.Unknown{Raw: out, ContentType: runtime.ContentTypeJSON}
		}
	}
	// As encoding/json embeds a raw message, and so as kube-apiserver's
	// records hold objects: without insignificant whitespace (a
	// pretty-printed body must not break the record's line), <, >, &,
	// U+2028 and U+2029 escaped.
	body, ok := jsonenc.AppendCompact(make([]byte, 0, len(body)), body)
	if !ok {
		return nil
	}
	return &runtime.Unknown{Raw: body, ContentType: runtime.ContentTypeJSON}
}

// omitManagedFields re-encodes body, a JSON object, without the
// managedFields of it or of its items (a list), as encoding/json encodes
// it: compact, HTML characters escaped. Numbers keep their precision
// (integers decode as int64). ok is false when body is not JSON.
func omitManagedFields(body []byte) (_ []byte, ok bool) {
	var m map[string]any
	if utiljson.Unmarshal(body, &m) != nil {
		return nil, false
	}
	strip := func(o any) {
		if om, ok := o.(map[string]any); ok {
			if md, ok := om["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
			}
		}
	}
	strip(m)
	if items, ok := m["items"].([]any); ok {
		for _, it := range items {
			strip(it)
		}
	}
	return jsonenc.Append(make([]byte, 0, len(body)), m)
}

func responseStatus(resp Response) *metav1.Status {
	if resp.Panic != nil {
		return &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: fmt.Sprintf("APIServer panic'd: %v", resp.Panic)}
	}
	st := &metav1.Status{Code: int32(resp.Code)}
	if resp.Code >= 400 {
		var s metav1.Status
		if json.Unmarshal(resp.ResponseBody, &s) == nil && s.Kind == "Status" {
			st.Status, st.Message, st.Reason, st.Details = s.Status, s.Message, s.Reason, s.Details
		}
	}
	return st
}

func responseRV(body []byte) string {
	var o struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &o) != nil {
		return ""
	}
	return o.Metadata.ResourceVersion
}

func withAnnotations(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m)+len(kv)/2+2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// WriterOf is the user a request acts as: its User, or for the server's
// own writes the controller's service account its Actor names (in
// kube-system, as kube-controller-manager's), else ServerUser.
func WriterOf(req *objects.Request) auth.User {
	switch {
	case req.User != nil:
		return *req.User
	case req.Actor != "":
		return auth.User{Name: req.Actor, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	}
	return ServerUser
}

// Annotate adds annotations (key, value pairs) to the record: admission
// webhooks' audit annotations. Safe for concurrent use.
func (r *Record) Annotate(kv ...string) {
	r.mu.Lock()
	r.ev.Annotations = withAnnotations(r.ev.Annotations, kv...)
	r.mu.Unlock()
}

// Written is the object service's Written hook: it attaches the write's
// diff to the request's record, or records a write no request recorded
// (the server's own: garbage collection, namespace cleanup, bootstrap; a
// deletecollection's every object after the first).
func (l *Log) Written(ctx context.Context, w objects.Write) {
	wr := l.diff(w)
	obj := w.New
	if obj == nil {
		obj = w.Old
	}
	if r := RecordFrom(ctx); r != nil {
		r.mu.Lock()
		if !r.wrote {
			r.wrote, r.write = true, wr
			if r.ev.ObjectRef != nil && r.ev.ObjectRef.Name == "" && obj != nil {
				r.ev.ObjectRef.Name = obj.GetName()
			}
			r.mu.Unlock()
			return
		}
		ev := r.ev
		ev.Annotations = nil
		r.mu.Unlock()
		defer wr.release()
		ev.Verb = w.Request.Verb
		if ev.ObjectRef != nil && obj != nil {
			ref := *ev.ObjectRef
			ref.Name, ref.Namespace = obj.GetName(), obj.GetNamespace()
			ev.ObjectRef = &ref
		}
		ev.Stage, ev.StageTimestamp = auditv1.StageResponseComplete, metav1.NewMicroTime(time.Now())
		ev.ResponseStatus = &metav1.Status{Code: http.StatusOK}
		ev.RequestObject, ev.ResponseObject = nil, nil
		var buf [6]string
		r.log.append(&ev, wr.annotations(buf[:0]), false) // the request's own record waits for it
		return
	}
	defer wr.release()
	if w.Request.User != nil {
		return // a request the policy records nothing of
	}
	u := WriterOf(w.Request)
	req := w.Request
	res := req.Resource
	a := Attributes{User: &u, Verb: req.Verb, ResourceRequest: true, APIGroup: res.Group, APIVersion: res.Version,
		Resource: res.Plural, Subresource: req.Subresource, Namespace: req.Namespace, Name: req.Name}
	d := l.policy.Evaluate(a)
	if d.Level == auditv1.LevelNone || d.Level == "" || d.omits(auditv1.StageResponseComplete) {
		return
	}
	now := metav1.NewMicroTime(time.Now())
	name, ns := req.Name, req.Namespace
	if obj != nil {
		name, ns = obj.GetName(), obj.GetNamespace()
	}
	ev := auditv1.Event{
		TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"},
		Level:    d.Level, AuditID: types.UID(newUID()), Stage: auditv1.StageResponseComplete,
		RequestURI: requestURI(res.Group, res.Version, res.Plural, ns, name, req.Subresource),
		Verb:       req.Verb, User: userInfo(u), UserAgent: "objwatch",
		ObjectRef: &auditv1.ObjectReference{Resource: res.Plural, Namespace: ns, Name: name,
			APIGroup: res.Group, APIVersion: res.Version, Subresource: req.Subresource},
		ResponseStatus:           &metav1.Status{Code: http.StatusOK},
		RequestReceivedTimestamp: now, StageTimestamp: now,
	}
	var buf [6]string
	l.append(&ev, wr.annotations(buf[:0]), false)
}

// written is what a write adds to its record: the resourceVersion it
// stored and its diff (the patch, then the paths, in one buffer of
// lineBufs). Its owner calls release once the record is encoded.
type written struct {
	rv       string
	diff     []byte
	patchEnd int // diff[:patchEnd] is the patch; nil diff: none (it failed)
}

func (l *Log) diff(w objects.Write) *written {
	b, end, err := appendDiff(getBuf(), w.Old, w.New)
	d := &written{rv: strconv.FormatInt(w.Revision, 10), diff: b, patchEnd: end}
	if err != nil {
		l.cfg.Log.Warn("audit diff", "err", err)
		putBuf(b)
		d.diff = nil
	}
	return d
}

// annotations appends w's annotations to kv. The values share w's
// buffer: they are valid until release.
func (w *written) annotations(kv []string) []string {
	kv = append(kv, ResourceVersionAnnotation, w.rv)
	if w.diff != nil {
		kv = append(kv, PatchAnnotation, bytesString(w.diff[:w.patchEnd]), ChangedPathsAnnotation, bytesString(w.diff[w.patchEnd:]))
	}
	return kv
}

func (w *written) release() {
	if w.diff != nil {
		putBuf(w.diff)
		w.diff = nil
	}
}

// bytesString is b as a string without a copy, for annotation values read
// only while b is unchanged (encoding a record).
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// append encodes ev, its annotations merged with extra (key, value pairs)
// and with empty chain fields, into a buffer of lineBufs and queues it.
func (l *Log) append(ev *auditv1.Event, extra []string, durable bool) ticket {
	var kv [16]string
	extra = append(append(kv[:0], extra...), SeqAnnotation, "", PrevHashAnnotation, "")
	b := getBuf()
	n := 1024 // the fields of a Metadata record; annotations (a diff) and objects come on top
	for i := 1; i < len(extra); i += 2 {
		n += len(extra[i]) + len(extra[i])/8
	}
	for _, v := range ev.Annotations {
		n += len(v) + len(v)/8
	}
	for _, o := range []*runtime.Unknown{ev.RequestObject, ev.ResponseObject} {
		if o != nil {
			n += len(o.Raw)
		}
	}
	line, chain := appendEvent(slices.Grow(b, n), ev, extra)
	return l.enqueue(queued{line, chain}, durable)
}

// lineBufs recycles the buffers records are encoded in (and writes'
// diffs): each is free again once the writer has copied its record into
// the file's buffer. A mutation's records cost two or three of them, a
// few KB each: allocated anew, they were most of the audit log's
// allocation (14 KB of a Metadata create's), which was 8% of the server's
// in a write benchmark.
var lineBufs sync.Pool

// maxPooledBuf bounds the buffers kept for reuse: a RequestResponse
// record of a large object is allocated and dropped.
const maxPooledBuf = 64 << 10

func getBuf() []byte {
	if p, ok := lineBufs.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 4096)
}

func putBuf(b []byte) {
	if cap(b) <= maxPooledBuf {
		lineBufs.Put(&b)
	}
}

func requestURI(group, version, resource, ns, name, sub string) string {
	p := "/api/" + version
	if group != "" {
		p = "/apis/" + group + "/" + version
	}
	if ns != "" {
		p += "/namespaces/" + ns
	}
	p += "/" + resource
	if name != "" {
		p += "/" + name
	}
	if sub != "" {
		p += "/" + sub
	}
	return p
}

func userInfo(u auth.User) authnv1.UserInfo {
	ui := authnv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		ui.Extra = make(map[string]authnv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			ui.Extra[k] = v
		}
	}
	return ui
}

// sourceIPs are the X-Forwarded-For addresses, X-Real-Ip, then the peer,
// as kube-apiserver lists them.
func sourceIPs(r *http.Request) []string {
	var ips []string
	for _, h := range strings.Split(r.Header.Get("X-Forwarded-For"), ",") {
		if ip := strings.TrimSpace(h); net.ParseIP(ip) != nil {
			ips = append(ips, ip)
		}
	}
	if ip := strings.TrimSpace(r.Header.Get("X-Real-Ip")); net.ParseIP(ip) != nil {
		ips = append(ips, ip)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host != "" && (len(ips) == 0 || ips[len(ips)-1] != host) {
		ips = append(ips, host)
	}
	return ips
}

// newUID returns a random (version 4) UUID in its text form.
func newUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	hex.Encode(s[9:13], b[4:6])
	hex.Encode(s[14:18], b[6:8])
	hex.Encode(s[19:23], b[8:10])
	hex.Encode(s[24:], b[10:])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return string(s[:])
}
