// Package client talks to a Kubernetes-compatible API server (objwatch or
// Kubernetes itself) over its REST and watch protocol, with typed results
// and no code generation.
//
//	cfg, err := client.Default() // KUBECONFIG, ~/.kube/config or in-cluster
//	rc, err := client.New(cfg)
//	cms := client.NewClient[*corev1.ConfigMap](rc, client.Resource{
//		GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap",
//	})
//	cm, err := cms.Get(ctx, "default", "settings", metav1.GetOptions{})
//	if errors.Is(err, client.ErrNotFound) { ... }
//
// # Names
//
// One rule across client, client/informer, client/controller and change:
// a function that makes something is New (the package's main type:
// client.New a REST, informer.New a SharedInformer, controller.New a
// Controller) or NewX (an X: client.NewClient, controller.NewSource,
// change.NewFilter); MustX is a NewX or ParseX that panics on bad input;
// informer.Shared returns a Factory's informer, shared by every caller
// asking for the same one. A wait is WaitFor followed by what ends it
// (WaitForSync, WaitForSyncOrRefusal) and ends early with ctx's error.
// The Builder's For, Owns and Watches are controller-runtime's words. The
// older spellings (client.For and Unstructured, informer.For,
// controller.Watch, Map and ClientFor, WaitSynced) still compile,
// deprecated. docs/CLIENT.md gives the reasons.
//
// # Pieces
//
//   - Config: where the server is and how to authenticate, from a
//     kubeconfig (FromKubeconfig), a pod's service account (InCluster), or
//     whichever applies (Default).
//   - REST: one connection to a server, shared by all clients of it. Its
//     transport speaks HTTP/2 with connection reuse and pings idle
//     connections, so a watch on a dead connection fails within about 45 s
//     instead of hanging (TCP keepalives do the same over HTTP/1.1).
//   - Client[T]: a typed client for one resource. T is a pointer to any
//     struct embedding metav1.TypeMeta and metav1.ObjectMeta — k8s.io/api
//     types or your own — or *unstructured.Unstructured for resources known
//     only at run time (resolve them with REST.Resource or REST.ResourceFor).
//   - Watcher[T]: one watch stream, read synchronously with Next.
//   - Raw[T]: an object read but not decoded (ListRaw, Watcher.NextRaw), so
//     a cache can skip decoding states it already has.
//
// # Several servers
//
// Config.Hosts lists further servers of the cluster beside Host (several
// `objwatch serve` on one etcd; from a kubeconfig, the cluster's
// objwatch.io/servers extension, see ServersExtension). A REST sends
// every request to its current server, at first Host, and moves to the
// next in the list when that one fails: a connection error
// (refused, reset, TLS failure, EOF before the answer), no answer headers
// within Config.AttemptTimeout, a 502, 503 or 504, a watch or list whose
// body breaks, a watch ERROR event with such a code, or a watch with
// bookmarks silent for Config.StallTimeout (ErrStalled). A failed server
// is skipped for 1 s, doubling with each failure in a row up to 30 s,
// unless every server is.
//
// The failed request itself goes to the next server at once when that is
// safe: reads (GET) always; writes (POST, PUT, PATCH, DELETE) only when
// the first server surely did not process them: the request was never
// written (no connection, TLS failure), or the answer is 503 (the server
// refused it: not ready, etcd lost, overloaded). A write answered 502 or
// 504, reset after it was sent, or timed out may have been processed: its
// error is returned and the next request goes to the next server. A 500
// is the request's own failure (a webhook, a conversion, a bug), which
// another server would repeat: it is returned and changes nothing. Each
// server is tried once per request before the Retry-After rules below
// apply. REST.Server reports the current server, REST.Failovers how often
// requests moved.
//
// Host is the preferred server, and requests return to it after a
// failover away from it (a failback), so that clients configured with
// different preferred servers keep their load spread after one restarts.
// Once its backoff has ended and 30–45 s (at random, so that clients
// moved together come back spread) have passed since requests left it,
// one request at a time is sent to it as a probe while the
// others stay where they are; when it answers, it is current again
// (REST.Failbacks counts these). A probe that fails counts as any
// failure: the preferred server backs off for twice as long, so one that
// stays down is tried at most once per backoff (at most every 30 s at
// length), and the probing request moves on under the rules above (a
// write only if it surely was not processed). The 30 s minimum keeps a
// client from following a server that flaps or restarts in a loop: each
// move away costs errors for writes whose answers are lost and a
// resumption for every watch. Nothing running is cut to move back: a
// watch streaming from another server stays there until it ends, and its
// resumption goes to the preferred server.
//
// A watch that fails ends with an error; client/informer resumes it from
// its last resourceVersion, which now goes to the next server. All
// servers share one etcd, so resourceVersions are global: the resumed
// watch starts right after the last event delivered, with no gap, no
// duplicate, and no relist while etcd still holds that history.
//
// # Exec credential plugins
//
// A kubeconfig user with an exec section (EKS, GKE, AKS, kubelogin) becomes
// Config.Exec: the plugin runs without a terminal and its token or client
// certificate is cached until it expires or the server answers 401, which
// drops it and retries the request once. Concurrent requests share one
// plugin run. As in client-go, a token, username or client certificate in
// the same user takes precedence and the plugin is not run.
//
// # Rate limiting and certificate rotation
//
// Config.QPS and Burst give a REST a client-side token bucket, as in
// client-go; every request sent takes a token (a watch once, when it
// starts). There is none by default: the server's priority and fairness
// answers an overloaded client with 429 and a Retry-After, which the client
// honours.
//
// Client certificates from CertFile and KeyFile are re-read every minute;
// a renewed pair is used from then on, and connections made with the old
// one are closed so that requests reconnect with it.
//
// # Errors
//
// Failures the server reports are *StatusError values carrying its
// metav1.Status. Test them with errors.Is against the sentinels (ErrNotFound,
// ErrConflict, ErrAlreadyExists, ErrGone, ErrForbidden, ErrInvalid, ...) or
// get the Status with errors.As. They also satisfy apimachinery's
// apierrors.APIStatus, so apierrors.IsNotFound works. Requests the server
// refuses with 429 or 503 and a Retry-After are retried (up to 5 times);
// RetryOnConflict retries optimistic-concurrency conflicts.
//
// # Access reviews
//
// REST.CanI asks whether the caller may do something (a
// SelfSubjectAccessReview, as `kubectl auth can-i`), REST.Rules what it
// may do in a namespace (a SelfSubjectRulesReview, as `kubectl auth can-i
// --list`; possibly incomplete, so decide with CanI), and REST.WhoAmI who
// the server takes it for (a SelfSubjectReview, as `kubectl auth
// whoami`). Every user may ask these of objwatch and of Kubernetes alike.
// A program that should work with only some namespaces can check its
// access at start and say what is missing, instead of failing later with
// 403s; client/informer reports the refusals it meets (RefusedError).
//
// # CBOR
//
// Config.PreferCBOR (or Client.WithCBOR for one client) makes a Client's
// reads ask for CBOR (KEP-4222): Get, List, ListRaw and Watch send
// Accept: application/cbor, application/json;q=0.9 (with the drop
// parameter under WithoutManagedFields), and every answer is decoded by
// its Content-Type, so a server that does not offer CBOR answers JSON
// and the client works the same: no discovery is needed. Objects are
// decoded by apimachinery's CBOR serializer (json tags honoured, unknown
// fields ignored, RawExtension fields transcoded to JSON), into the same
// Go values the JSON path gives; a list in CBOR is read whole before its
// items are passed on (JSON lists stream); a watch is a CBOR sequence of
// WatchEvents, whose ERROR Status becomes the same *StatusError, as does
// a CBOR error response. Raw.IsCBOR tells which encoding Raw.Bytes holds;
// PeekMeta of a CBOR object decodes its identity (with allocations).
//
// Only what CBOR can carry uses it: typed clients whose T is a
// runtime.Object (k8s.io/api types, or structs with generated deep
// copies; the lenient decoder needs one) and unstructured clients. Other
// T, clients with watch extensions (projection, deltas: their events'
// additions are JSON only), and objwatch's commit times (not in CBOR
// events: Event.CommitTime stays zero) read JSON. Request bodies
// (create, update, patch, delete options) and write answers stay JSON.
//
// It is off by default, as protobuf is: binary watch events carry no
// commit times, and client-go reads JSON unless told otherwise. Against
// objwatch a list of 10,000 objects with the client's decode takes about
// half JSON's time over CBOR (the server writes kept item encodings),
// allocating 1.1–2.5× as much in the client (docs/PERFORMANCE.md,
// "Client library: CBOR and protobuf").
//
// # Protobuf
//
// Config.PreferProtobuf (or Client.WithProtobuf for one client) makes the
// reads of clients of generated protobuf types — the k8s.io/api types,
// the built-in kinds Kubernetes serves in protobuf — ask for
// application/vnd.kubernetes.protobuf, as kube-controller-manager and the
// kubelet do: Get, List, ListRaw and Watch send Accept:
// application/vnd.kubernetes.protobuf, application/json;q=0.9, and the
// answer is decoded by its Content-Type, so a server or resource without
// protobuf answers JSON and the client works the same. Objects, list
// metadata and Statuses are decoded by their generated Unmarshal methods;
// the client reads by hand (with protowire) only an envelope's raw
// message, a list's items and an object's identity, in place: ListRaw
// passes each item on undecoded (Raw.IsProtobuf; Raw.Bytes is the
// object's message without its envelope), and PeekMeta reads its
// identity without allocating, as for JSON. A protobuf list is read whole
// before its items are passed on; a watch is length-delimited
// WatchEvents, whose ERROR Status becomes the same *StatusError, as does
// a protobuf error response. Result.Into decodes a protobuf answer into a
// generated type.
//
// Where both are preferred, protobuf goes first for the types that have
// it and CBOR serves the rest (custom resources). The same exclusions as
// CBOR's apply: other T, watch extensions and commit times (Event.CommitTime
// stays zero over protobuf, so an informer's lag metrics see none) read
// JSON or go without; writes stay JSON. Off by default, as CBOR is.
// Against objwatch a list of 10,000 ConfigMaps with the client's decode
// takes about a seventh of JSON's time (docs/PERFORMANCE.md, "Client
// library: CBOR and protobuf").
//
// # Concurrency
//
// Config is plain data. REST and Client are safe for concurrent use and
// start no goroutines (the timers of attempt and stall timeouts run
// their short callbacks on the runtime's timer goroutines). A Watcher is read by one goroutine at a time; its
// Stop may be called from any goroutine and must be called by its owner.
//
// This package never imports objwatch's server or storage, etcd, or
// client-go (a test enforces it), so programs using it stay small.
package client
