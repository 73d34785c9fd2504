// Package endpoints is the server's HTTP layer: it parses a request,
// applies the server's limits, calls the object service (package objects)
// and writes JSON, protobuf or CBOR objects, Tables or watch frames. It
// holds no objects and reaches no storage: everything it serves comes from
// the object service, and every watch runs one loop (serveWatch) over an
// objects.Source, whether the watch cache or etcd feeds it.
//
// Request filters (recovery, authentication and impersonation) wrap the
// handlers; the facade (package server) composes them with its routes.
//
// # Content negotiation
//
// The Accept header's first clause the server can answer (negotiation.go)
// picks the encoding (encoding.go: JSON; protobuf for built-in kinds;
// CBOR for every resource; objects stored as JSON are decoded into their
// Go types for protobuf and CBOR, and encoded by apimachinery's
// serializers; errors are Status values in the client's encoding) and a
// conversion, as in Kubernetes:
// as=Table, as=PartialObjectMetadata or as=PartialObjectMetadataList with
// g=meta.k8s.io and v=v1 or v1beta1, on get, list, watch and the answers
// of writes (a list asked as PartialObjectMetadata, or an object as a
// list, is Kubernetes' 406; a Table is JSON only). Beyond Kubernetes 1.37, the parameter
// drop=metadata.managedFields of KEP-5958 (for example
// "Accept: application/json;drop=metadata.managedFields") leaves
// metadata.managedFields out of every object returned, converted or not,
// including watch events: a watch served from the watch cache shares one
// encoding without managedFields per event among all the watches that
// drop them, as the full encoding is shared among the others.
//
// # Limits: admission, then fair queuing
//
// A request other than a watch passes two limits before it executes, in
// the manner of kube-apiserver's max-in-flight limits and its API priority
// and fairness (with one priority level and one flow per user):
//
//   - Admission (inflight.go): at most Config.MaxReadInFlight reads and
//     Config.MaxMutatingInFlight mutations are admitted (queued or
//     executing) at once, of which one user may hold
//     Config.UserInFlightShare (default half). Beyond that the request is
//     answered at once with kube-apiserver's 429 "Too many requests,
//     please try again later." and Retry-After: 1. The share is the bound
//     of each user's queue: one user flooding the server fills its own
//     queue, never the others' admission.
//   - Execution (fairqueue.go): at most Config.ExecutionSeats admitted
//     requests execute at once (default DefaultExecutionSeatsPerCPU per
//     CPU: the CPU, not the number of requests, is what they compete
//     for). The others wait in their user's FIFO queue; a freed seat goes
//     to the users with waiting requests in turn (round robin), so another
//     user's request waits for about one seat to free, however many
//     requests the flooding user has queued. While several users are
//     active, each executes at most its share of the CPUs (see
//     fairQueue), so another user's request also runs beside few of the
//     flood's. A request waits at most a
//     quarter of the request timeout (at most a minute), as in
//     kube-apiserver, and is then answered the same 429. The request
//     timeout covers the queue wait, as in kube-apiserver. A request's
//     body is read before it queues (prereadBody), so that a body that
//     trickles in holds an admission slot, never a seat.
//   - Delivery (delivery.go): a write's watch event costs the server CPU
//     after the write has returned, to deliver it to every watch, which
//     no seat covered; a user whose writes each reach thousands of
//     watches could keep the CPUs busy delivering while taking one seat.
//     As kube-apiserver's mutating work estimator (which adds latency per
//     watcher to a write's seats), a successful write keeps its seat
//     after it returns for the estimated delivery CPU (Config.WatchEventCPU
//     per watch the event may go to plus a nanosecond per byte, times
//     the seats per CPU, at most maxDeliveryHold). The watches counted
//     are kube-apiserver's "interested" ones: those of the resource in
//     every namespace and, for a namespaced object, those of its
//     namespace. Beyond kube-apiserver, such a held seat yields to another
//     user's waiting request when its own user is over its share (the
//     hold still counts against that user's share until it ends), so a
//     user arriving beside a flood does not wait out the flood's holds.
//   - Delivery, the writes: when an event reaches thousands of watches,
//     each watch's goroutine becomes runnable at once, and Go's scheduler
//     has no priorities: a request readied meanwhile would wait behind
//     all of them (tens to hundreds of milliseconds on two CPUs). Watches
//     write through a gate (watchstream.Gate, Config.WatchWriters, one
//     per CPU): the others wait parked, so requests wait behind a few
//     writes at most. While more than one user is active (fair queuing's
//     flows), the gate keeps one of its slots from new writes, so one CPU
//     is left to the requests (and a co-located etcd) however many
//     events wait to be delivered; one user's own fan-out delivers with
//     every CPU.
//     A write keeps its place at most watchWriterPatience, and a watch
//     whose write took longer (a client slow to read) passes by the gate
//     until one of its writes is quick again.
//
// The server's own work (its controllers call the object service, not
// this API) passes neither limit. Members of system:masters are exempt,
// as in kube-apiserver's exempt priority level, so that an administrator
// can still act on a flooded server: they are admitted
// beyond the limits (taking an admission slot only when one is free within
// their share) and execute at once without a seat. A watch, being
// long-running, takes no admission slot, and holds an execution seat only
// while it starts (objects.Service.Watch), as kube-apiserver holds one for
// a watch's initialization; a watch whose queue wait ends gets the 429.
//
// # Concurrency
//
// An API is safe for concurrent use by any number of requests. It starts
// no goroutines; each watch runs on its request's goroutine and ends when
// the request, its timeout or StopWatches ends.
package endpoints

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/watchstream"
)

// Config configures an API. All fields but Metrics and Authenticator are
// required; the facade fills them from its own Config.
type Config struct {
	Objects  *objects.Service
	Registry *registry.Registry
	// Authenticator authenticates requests (WithAuthentication); nil
	// allows anonymous access.
	Authenticator *auth.Authenticator
	// Authorize decides requests that are not on a resource (discovery,
	// OpenAPI, version, metrics; WithAuthentication asks it), and
	// impersonation. nil allows them. Resource requests are authorized by
	// the object service.
	Authorize func(u *auth.User, a auth.Attributes) error
	Log       *slog.Logger
	// Metrics is where request and watch metrics are registered; nil
	// disables them.
	Metrics prometheus.Registerer
	// Pacer batches busy watches' output (see watchstream.Pacer).
	Pacer *watchstream.Pacer
	// Audit records requests (WithAudit); nil records nothing.
	Audit *audit.Log
	// FieldManager does server-side apply through the scale subresource;
	// nil: such applies are 415, as applies are without a field manager.
	FieldManager *fieldmanager.Manager

	MaxRequestBytes                      int64
	MaxReadInFlight, MaxMutatingInFlight int
	// UserInFlightShare is the share of each in-flight limit that one
	// user may hold (0: DefaultUserInFlightShare; 1 or more: no share).
	UserInFlightShare float64
	// ExecutionSeats is how many admitted requests execute at once (0:
	// DefaultExecutionSeatsPerCPU per CPU); the others wait in per-user
	// queues served in turn (see the package doc).
	ExecutionSeats int
	// WatchEventCPU is the server CPU one watch event costs to deliver
	// to one watch, besides a nanosecond per byte: a write's seat is held
	// that long per watch its event may go to after it returns (see the
	// package doc, "Delivery"). 0: DefaultWatchEventCPU; negative: no
	// hold.
	WatchEventCPU time.Duration
	// WatchWriters is how many watches write their events at once (0:
	// one per CPU, one fewer while more than one user is active, see
	// DefaultWatchWriters; negative: no limit); see the package doc,
	// "Delivery".
	WatchWriters   int
	RequestTimeout time.Duration
	// MinWatchTimeout: watches without timeoutSeconds end after a random
	// duration in [MinWatchTimeout, 2*MinWatchTimeout).
	MinWatchTimeout time.Duration
	// NoExtensions: the watch extensions' parameters are ignored, as a
	// server without them would (server.Config.WithoutWatchExtensions).
	NoExtensions      bool
	WatchWriteTimeout time.Duration
}

// API serves the resource, discovery and root paths. Its concerns are
// types of their own, held by value (no indirection on a request's path):
// discovery documents (discovery.go), request bodies (body.go) and the
// watch loop (watch.go); API itself keeps the filters, the limits and the
// verbs.
type API struct {
	discovery discovery
	bodies    bodies
	watches   watches

	cfg      Config
	objects  *objects.Service
	registry *registry.Registry
	metrics  *metrics

	reads, mutations *inFlight
	seats            *fairQueue
	impersonator     auth.Impersonator // remembers which mode allowed whom
}

// New returns an API and registers its metrics.
func New(cfg Config) (*API, error) {
	if cfg.Objects == nil || cfg.Registry == nil || cfg.Pacer == nil || cfg.Log == nil {
		return nil, errors.New("endpoints: incomplete config")
	}
	limitJSONPatchCopies(cfg.MaxRequestBytes)
	reads := newInFlight(cfg.MaxReadInFlight, cfg.UserInFlightShare)
	mutations := newInFlight(cfg.MaxMutatingInFlight, cfg.UserInFlightShare)
	seats := newFairQueue(cfg.ExecutionSeats)
	gate := newDeliveryGate(cfg.WatchWriters)
	m, err := newMetrics(cfg.Metrics, cfg.Pacer.Window, reads, mutations, seats, gate)
	if err != nil {
		return nil, fmt.Errorf("endpoints: %w", err)
	}
	a := &API{
		discovery: discovery{registry: cfg.Registry},
		bodies:    bodies{maxBytes: cfg.MaxRequestBytes},
		watches:   watches{metrics: m, pacer: cfg.Pacer, gate: gate},
		cfg:       cfg, objects: cfg.Objects, registry: cfg.Registry, metrics: m,
		reads: reads, mutations: mutations, seats: seats,
	}
	if cfg.WatchWriters == 0 {
		// The default gate keeps a CPU for requests while users share.
		seats.onSharing = gate.Keep
	}
	a.watches.stopping, a.watches.stop = context.WithCancel(context.Background())
	return a, nil
}

// WithAuthentication authenticates every request but the health checks
// and, for a request without credentials, /version (401 when no
// authenticator recognises it), refuses impersonation the
// user may not do, and puts the user in the request's context.
func (a *API) WithAuthentication(next http.Handler) http.Handler {
	if a.cfg.Authenticator == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealthPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		r = withInfo(r) // parsed once for authorization, audit and routing
		u, err := a.cfg.Authenticator.AuthenticateRequest(r)
		if err != nil {
			if errors.Is(err, auth.ErrNoCredentials) && (r.URL.Path == "/version" || r.URL.Path == "/version/") {
				// The version is public, as the health checks are: a
				// request without credentials gets it (bad ones a 401).
				next.ServeHTTP(w, r)
				return
			}
			if log := a.cfg.Audit; log != nil {
				attrs, _, _ := auditAttributes(r)
				if rec := log.Begin(audit.Request{HTTP: r, Received: time.Now(), Attributes: attrs}); rec != nil {
					rec.Unauthenticated(r)
				}
			}
			WriteStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		attrs := authzAttributes(r)
		sender := u
		u, err = a.impersonator.Impersonate(r.Header, u, attrs, func(u auth.User, at auth.Attributes) bool {
			return a.cfg.Authorize == nil || a.cfg.Authorize(&u, at) == nil
		})
		if err != nil {
			WriteStatus(w, err)
			return
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "Impersonate-") {
				r.Header.Del(k) // as kube-apiserver: nothing further down sees them
			}
		}
		if !attrs.ResourceRequest && a.cfg.Authorize != nil {
			if err := a.cfg.Authorize(&u, attrs); err != nil {
				WriteStatus(w, err)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(auth.WithUser(withImpersonator(r.Context(), sender, u), u)))
	})
}

// WithRecovery answers a panicking handler's request with 500 and logs it.
func (a *API) WithRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.cfg.Log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v)
				WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("%v", v)))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// isHealthPath reports whether path is a health check, which is served
// without authentication and not audited.
func isHealthPath(path string) bool {
	switch path {
	case "/healthz", "/livez", "/readyz":
		return true
	}
	return false
}

// NotFoundPath is Kubernetes' 404 for a path it does not serve.
func NotFoundPath() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found"}}},
	}}
}

// notFoundInVersion is kube-apiserver's 404 for a path under a group
// version it serves that names no resource or subresource of it: a
// Status without the causes of NotFoundPath.
func notFoundInVersion() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{},
	}}
}

// serveResource handles every request on a resource path.
func (a *API) serveResource(w http.ResponseWriter, r *http.Request, info requestInfo) {
	res, ok := a.registry.Get(info.gvr)
	if !ok {
		writeStatusFor(w, r, NotFoundPath())
		return
	}
	if info.namespaceSet && !res.Namespaced {
		writeStatusFor(w, r, notFoundInVersion())
		return
	}
	own := res.Lifecycle != nil && res.Lifecycle.UpdateSubresource != "" && info.subresource == res.Lifecycle.UpdateSubresource
	review := res.Reviews[info.subresource] != nil
	history := info.subresource == HistorySubresource && info.verb == "get"
	updateSub := info.subresource != "" && slices.Contains(res.UpdateSubresources, info.subresource)
	if !res.HasSubresource(info.subresource) && !own && !history {
		writeStatusFor(w, r, notFoundInVersion())
		return
	}
	if (res.Review || review) && info.verb != "create" {
		writeStatusFor(w, r, apierrors.NewMethodNotSupported(gr(res), info.verb))
		return
	}
	if info.verb == "watch" && r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatusFor(w, r, apierrors.NewMethodNotSupported(gr(res), strings.ToLower(r.Method)))
		return
	}
	if updateSub && info.verb != "get" && info.verb != "update" && info.verb != "patch" {
		// As kube-apiserver, which has no route for the method.
		writeStatusFor(w, r, apierrors.NewGenericServerResponse(http.StatusMethodNotAllowed, r.Method, schema.GroupResource{}, "", "", 0, false))
		return
	}
	if own && info.verb != "update" {
		writeStatusFor(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Group: res.Group, Resource: res.Plural + "/" + info.subresource}, info.verb))
		return
	}
	if info.namespaceSet && info.namespace == "" {
		writeStatusFor(w, r, apistatus.BadRequest("namespace must not be empty"))
		return
	}
	if res.DeprecationWarning != "" {
		// Every request to a deprecated version, as kube-apiserver warns.
		addWarnings(w, []string{res.DeprecationWarning})
	}
	neg, err := negotiate(r, res)
	if err != nil {
		// As Kubernetes, which negotiates before doing anything.
		writeStatusFor(w, r, err)
		return
	}
	extVerb := info.verb
	if info.subresource != "" || history {
		extVerb = ""
	}
	if _, err := a.extensions(r, extVerb); err != nil {
		writeStatusFor(w, r, err)
		return
	}
	req := info.request(r, res)
	a.instrument(w, info, func(w http.ResponseWriter) {
		if info.verb == "watch" && info.subresource != "scale" {
			a.watch(w, r, req)
			return
		}
		switch {
		case neg.yaml:
			cw := &convertedResponse{ResponseWriter: w, convert: toYAML}
			defer cw.send()
			w = cw
		case prettyPrint(r):
			cw := &convertedResponse{ResponseWriter: w, convert: indented}
			defer cw.send()
			w = cw
		}
		r, release, ok := a.admitted(w, r, info.verb)
		if !ok {
			return
		}
		defer release()
		ctx := r.Context()
		if r.Body != nil && r.Body != http.NoBody {
			// A body that trickles in must not hold its slot past the
			// request's deadline: its reads fail then (see readBody).
			// Where the writer cannot (tests' recorders), the body is
			// read without a deadline.
			deadline, _ := ctx.Deadline()
			_ = http.NewResponseController(w).SetReadDeadline(deadline)
			a.bodies.prereadBody(r)
		}
		done, ok := a.execute(w, r)
		if !ok {
			return
		}
		var hold time.Duration
		defer func() { done(hold) }()
		var err error
		switch {
		case info.subresource == "scale":
			err = a.serveScale(w, r, req, info)
		case history:
			err = a.history(w, r, req)
		case info.verb == "get":
			err = a.get(w, r, req)
		case info.verb == "list":
			err = a.list(w, r, req)
		case info.verb == "create":
			err = a.create(w, r, req, info)
		case info.verb == "update":
			err = a.update(w, r, req, info)
		case info.verb == "patch":
			err = a.patch(w, r, req)
		case info.verb == "delete":
			err = a.delete(w, r, req)
		case info.verb == "deletecollection":
			err = a.deleteCollection(w, r, req)
		default:
			err = apierrors.NewMethodNotSupported(res.GVR().GroupResource(), info.verb)
		}
		if err == nil {
			hold = a.deliveryHold(r, req, info.verb)
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
				err = apierrors.NewTimeoutError("request did not complete within the allowed duration", 1)
			}
			writeStatusFor(w, r, err)
		}
	})
}

func gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}
