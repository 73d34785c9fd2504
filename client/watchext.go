package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Watch extensions (objwatch issue 26; docs/WATCH-EXTENSIONS.md): field
// masks, projections and delta events. A server that offers them lists
// them in GET /version's "watchExtensions" field, comma-separated; a
// client sends their parameters only to such a server, since one without
// them (kube-apiserver) would ignore them and send full watches.
const (
	ExtFieldMask   = "fieldMask"
	ExtProjection  = "projection"
	ExtWatchDeltas = "watchDeltas"
)

// Extensions is the set of watch extensions a server offers.
type Extensions []string

// Has reports whether the server offers the named extension.
func (e Extensions) Has(name string) bool { return slices.Contains(e, name) }

// serverVersion is the part of /version the client reads.
type serverVersion struct {
	WatchExtensions string `json:"watchExtensions"`
}

// WatchExtensions returns the watch extensions the server offers (none for
// a server without them), asking GET /version once per REST and
// remembering a successful answer. A failed request is not remembered:
// the next call asks again. A server that refuses /version (an answer
// other than 2xx) offers none.
//
// With several servers (Config.Hosts), the answer of the first server
// asked stands for all: the servers of one cluster run one version.
func (r *REST) WatchExtensions(ctx context.Context) (Extensions, error) {
	r.extMu.Lock()
	defer r.extMu.Unlock()
	if r.ext != nil {
		return *r.ext, nil
	}
	body, err := r.Raw(ctx, "/version")
	var se *StatusError
	switch {
	case errors.As(err, &se):
		r.ext = &Extensions{}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("watch extensions: %w", err)
	}
	var v serverVersion
	if err := unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("watch extensions: /version: %w", err)
	}
	ext := Extensions{}
	for _, s := range strings.Split(v.WatchExtensions, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ext = append(ext, s)
		}
	}
	r.ext = &ext
	return ext, nil
}

// WatchParams are the watch-extension parameters of a client's lists and
// watches (see Client.WithWatchParams). The zero value asks for nothing.
type WatchParams struct {
	// FieldMask is the mask's pointers (the fieldMask parameter); the
	// server checks them. On a list it is sent only with Projection.
	FieldMask []string
	// Projection asks for projection=mask: objects trimmed to the mask
	// plus their identity fields, in watches and lists.
	Projection bool
	// Deltas asks for watchDeltas=true: MODIFIED events may carry a JSON
	// Patch (Watcher.Patch) instead of the whole object. Watches only.
	Deltas bool
}

// add sets p's parameters on q, for a watch or (watch false) a list.
func (p WatchParams) add(q url.Values, watch bool) {
	if !watch && !p.Projection {
		return // a mask without projection means nothing to a list
	}
	if len(p.FieldMask) > 0 {
		q.Set("fieldMask", strings.Join(p.FieldMask, ","))
	}
	if p.Projection {
		q.Set("projection", "mask")
	}
	if watch && p.Deltas {
		q.Set("watchDeltas", "true")
	}
}

// WithWatchParams returns a copy of c whose List, ListRaw and Watch send
// p's watch-extension parameters. It does not check that the server
// offers them (see REST.WatchExtensions): a server without them ignores
// them and sends full objects and every event.
func (c *Client[T]) WithWatchParams(p WatchParams) *Client[T] {
	out := *c
	p.FieldMask = slices.Clone(p.FieldMask)
	out.params = p
	return &out
}
