package lifecycle

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// StorageReadiness is Kubernetes' storage-readiness post-start hook (the
// readyz check poststarthook/storage-readiness, GA in 1.37): the server is
// not ready until the watch caches of the resources it serves at start
// have loaded their first list, or until Timeout has passed since they
// started. The resources served at start are the built-in ones and those
// of the CRDs Established when the server first read them: until Known
// says they have been read, the check waits (kube-apiserver's readiness
// also waits for its CRD informer to sync, and serves a CRD's resources
// once its cache is built) (kube-apiserver's --storage-initialization-timeout, 1 minute),
// after which it is ready anyway: a cache that cannot load does not keep
// the server out of its load balancer forever, and meanwhile its reads
// go to etcd. Once passed the check stays passed, as a finished hook does.
// Safe for concurrent use.
type StorageReadiness struct {
	// Pending names the resources whose caches have not loaded yet.
	Pending func() []string
	Timeout time.Duration
	Log     *slog.Logger

	mu      sync.Mutex
	started time.Time
	known   bool
	done    bool
}

// Known records that every cache the check waits for has started (the
// CRDs have been read): until then Check fails, but for the timeout.
func (r *StorageReadiness) Known() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known = true
}

// Start records that the caches have started: the timeout runs from now.
func (r *StorageReadiness) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started.IsZero() {
		r.started = time.Now()
	}
}

// Check is nil once every cache started at start has loaded, or Timeout
// has passed since Start; otherwise an error naming what it waits for.
func (r *StorageReadiness) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
		return nil
	case r.started.IsZero():
		return fmt.Errorf("watch caches not started")
	}
	pending := r.Pending()
	if !r.known {
		pending = append(pending, "custom resource definitions (not read yet)")
	}
	if len(pending) == 0 {
		r.done = true
		r.Log.Info("storage is ready for all registered resources", "after", time.Since(r.started).Round(time.Millisecond))
		return nil
	}
	if time.Since(r.started) >= r.Timeout {
		r.done = true
		r.Log.Warn("deadline exceeded while waiting for storage readiness; ignoring", "timeout", r.Timeout, "pending", pending)
		return nil
	}
	const shown = 5
	names := strings.Join(pending[:min(len(pending), shown)], ", ")
	if len(pending) > shown {
		names += fmt.Sprintf(" and %d more", len(pending)-shown)
	}
	return fmt.Errorf("watch caches initializing: %s", names)
}
