package endpoints

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
)

// maxAuditedResponse bounds how much of a read's response a
// RequestResponse record keeps; a longer one is recorded without it.
const maxAuditedResponse = 3 << 20

// WithAudit records every authenticated request per the audit policy
// (Config.Audit; nil records nothing): RequestReceived when it arrives,
// ResponseStarted when a watch starts, ResponseComplete when it ends,
// Panic when its handler panics. It goes inside WithAuthentication (it
// records the user) and puts the record in the request's context, where
// the object service's Written hook (audit.Log.Written) attaches each
// write's diff.
//
// A mutation's response is held until its ResponseComplete record is on
// disk: a client never sees a write acknowledged whose record a crash
// could lose. A write the log has no room for is refused before etcd
// (507, audit.Log.Reserve); when a record still cannot be written the
// client gets 500 (the write may have happened).
func (a *API) WithAudit(next http.Handler) http.Handler {
	log := a.cfg.Audit
	if log == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealthPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		received := time.Now()
		attrs, mutating, watch := auditAttributes(r)
		req := audit.Request{HTTP: r, Received: received, Attributes: attrs}
		if u, ok := auth.UserFrom(r.Context()); ok {
			req.User = &u
			attrs.User = &u
			req.Attributes = attrs
		}
		if im, ok := r.Context().Value(impersonatorKey{}).(auth.User); ok {
			req.Impersonator = &im
		}
		rec := log.Begin(req)
		if rec == nil {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Audit-ID", rec.AuditID())
		rec.Stage(auditv1.StageRequestReceived)
		var reqBody *bytes.Buffer
		if mutating && rec.WantsRequest() && r.Body != nil {
			reqBody = new(bytes.Buffer)
			r.Body = teeBody{Reader: io.TeeReader(r.Body, reqBody), Closer: r.Body}
		}
		r = r.WithContext(audit.WithRecord(r.Context(), rec))
		aw := &auditWriter{ResponseWriter: w, rec: rec, hold: mutating, watch: watch, keep: rec.WantsResponse()}
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					rec.Complete(audit.Response{Panic: v}, false)
				}
				panic(v)
			}
		}()
		next.ServeHTTP(aw, r)
		if aw.code == 0 {
			aw.code = http.StatusOK
		}
		resp := audit.Response{Code: aw.code, Mutating: mutating, DryRun: r.URL.Query().Has("dryRun")}
		if reqBody != nil {
			resp.RequestBody = reqBody.Bytes()
		}
		if !aw.overflow {
			resp.ResponseBody = aw.body.Bytes()
		}
		if err := rec.Complete(resp, mutating); err != nil && mutating {
			WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("audit log: %w", err)))
			return
		}
		if mutating {
			aw.send()
		}
	})
}

// impersonatorKey marks, in a request's context, the user who sent a
// request that impersonates another (WithAuthentication puts it there).
type impersonatorKey struct{}

func withImpersonator(ctx context.Context, sender, as auth.User) context.Context {
	if sender.Name == as.Name && sender.UID == as.UID && slices.Equal(sender.Groups, as.Groups) {
		return ctx
	}
	return context.WithValue(ctx, impersonatorKey{}, sender)
}

// auditAttributes are what the policy matches r on.
func auditAttributes(r *http.Request) (a audit.Attributes, mutating, watch bool) {
	info, ok := resourceInfo(r)
	if !ok {
		return audit.Attributes{Verb: strings.ToLower(r.Method), Path: r.URL.Path}, false, false
	}
	a = audit.Attributes{
		Verb: info.verb, ResourceRequest: true, APIGroup: info.gvr.Group, APIVersion: info.gvr.Version,
		Resource: info.gvr.Resource, Subresource: info.subresource, Namespace: info.namespace, Name: info.name,
	}
	switch info.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		mutating = true
	case "watch":
		watch = true
	}
	return a, mutating, watch
}

type teeBody struct {
	io.Reader
	io.Closer
}

// auditWriter sees a response for its record: it holds a mutation's
// response until the record is durable (hold), keeps what a record needs
// of the body (keep, or an error's Status), and writes a watch's
// ResponseStarted stage.
type auditWriter struct {
	http.ResponseWriter
	rec         *audit.Record
	hold, watch bool
	keep        bool
	code        int
	body        bytes.Buffer
	overflow    bool
}

func (w *auditWriter) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	if w.watch {
		w.rec.Stage(auditv1.StageResponseStarted)
	}
	if !w.hold {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.hold {
		return w.body.Write(b)
	}
	if !w.watch && (w.keep || w.code >= 400) && !w.overflow {
		if w.body.Len()+len(b) > maxAuditedResponse {
			w.overflow = true
			w.body = bytes.Buffer{}
		} else {
			w.body.Write(b)
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *auditWriter) Flush() {
	if w.hold {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// send writes a held response.
func (w *auditWriter) send() {
	w.ResponseWriter.WriteHeader(w.code)
	w.ResponseWriter.Write(w.body.Bytes())
}
