package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Event is one watch event as a watcher received it (bookmarks too).
type Event struct {
	Type  string        `json:"type"`
	Key   string        `json:"key,omitempty"`
	RV    int64         `json:"rv"`
	Value string        `json:"value,omitempty"`
	UID   string        `json:"uid,omitempty"`
	At    time.Duration `json:"at"`
}

// runEnded is Segment.Ended of a watch the harness stopped at the run's end.
const runEnded = "run ended"

// Segment is one watch request of a watcher: from its resourceVersion
// until the stream broke or ended.
type Segment struct {
	Watcher int           `json:"watcher"`
	Server  string        `json:"server"`
	From    int64         `json:"from"`
	Resumed bool          `json:"resumed"` // From is where an earlier segment stopped, not a list
	Start   time.Duration `json:"start"`
	End     time.Duration `json:"end"`
	Events  []Event       `json:"events"`
	// Ended says how: "timeout" (the server ended it), "idle" (nothing
	// for the idle limit: the watcher gave up), "error: ...", "410".
	Ended string `json:"ended"`
}

// Relist is a watcher's list, which its next watch starts from: the first
// one, and one after every 410.
type Relist struct {
	Watcher  int             `json:"watcher"`
	Server   string          `json:"server"`
	At       time.Duration   `json:"at"`
	RV       int64           `json:"rv"`
	Items    map[string]Item `json:"items"`
	After410 bool            `json:"after410"`
}

// watcher lists and watches the namespace like an informer: a watch from
// the list's resourceVersion, resumed after any break from the last
// resourceVersion seen (event or bookmark) on any server, and a relist
// after 410 Gone. It is used by one goroutine.
type watcher struct {
	id      int
	since   func() time.Duration
	servers []endpoint
	rng     *rand.Rand
	idle    time.Duration
	cur     int // the server it watches; it stays there after most breaks

	segments []Segment
	relists  []Relist
	gone     int // 410s seen
}

func (w *watcher) run(ctx context.Context) {
	var from int64
	after410 := false
	for ctx.Err() == nil {
		if from == 0 {
			rv, ok := w.relist(ctx, after410)
			if !ok {
				sleep(ctx, 100*time.Millisecond)
				continue
			}
			from, after410 = rv, false
		}
		seg := w.watch(ctx, from)
		if seg.Ended == "410" {
			w.gone++
			from, after410 = 0, true
		} else {
			for _, e := range seg.Events {
				from = max(from, e.RV)
			}
		}
		w.segments = append(w.segments, seg)
		if seg.Ended != "timeout" {
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// server is where the next request goes: mostly the server of the last
// one, as behind a load balancer with sticky connections, so that a
// watcher whose server restarted resumes there, from a resourceVersion
// that the restarted server's watch cache does not have (etcd answers,
// or 410 once compacted).
func (w *watcher) server() endpoint {
	if w.rng.IntN(4) == 0 {
		w.cur = w.rng.IntN(len(w.servers))
	}
	return w.servers[w.cur]
}

// relist lists the namespace by pages of 5 from one server.
func (w *watcher) relist(ctx context.Context, after410 bool) (int64, bool) {
	srv := w.server()
	r := Relist{Watcher: w.id, Server: srv.name, At: w.since(), Items: map[string]Item{}, After410: after410}
	cont := ""
	for {
		q := url.Values{"limit": {"5"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		code, obj, err := DoJSON(rctx, srv.hc, http.MethodGet, srv.base()+"?"+q.Encode(), nil)
		cancel()
		if err != nil || code != http.StatusOK {
			return 0, false
		}
		if r.RV == 0 {
			r.RV = obj.RV()
		}
		for _, it := range obj.Items {
			r.Items[it.Metadata.Name] = Item{Value: it.Data["v"], RV: it.RV(), UID: it.Metadata.UID}
		}
		if cont = obj.Metadata.Continue; cont == "" {
			break
		}
	}
	w.relists = append(w.relists, r)
	return r.RV, true
}

type watchFrame struct {
	Type   string `json:"type"`
	Object object `json:"object"`
}

// watch runs one watch request from rv and records it.
func (w *watcher) watch(ctx context.Context, from int64) (seg Segment) {
	srv := w.server()
	seg = Segment{Watcher: w.id, Server: srv.name, From: from, Start: w.since(), Resumed: len(w.relists) == 0 || w.lastRelistRV() != from}
	defer func() { seg.End = w.since() }()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(w.idle, cancel)
	defer idle.Stop()
	q := url.Values{
		"watch": {"1"}, "resourceVersion": {strconv.FormatInt(from, 10)}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {strconv.Itoa(2 + w.rng.IntN(6))},
	}
	req, _ := http.NewRequestWithContext(wctx, http.MethodGet, srv.base()+"?"+q.Encode(), nil)
	resp, err := srv.hc.Do(req)
	if err != nil {
		seg.Ended = w.broken(ctx, wctx, err)
		return seg
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusGone:
		seg.Ended = "410"
		return seg
	case resp.StatusCode != http.StatusOK:
		seg.Ended = fmt.Sprintf("error: HTTP %d", resp.StatusCode)
		return seg
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var f watchFrame
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) {
				seg.Ended = "timeout"
			} else {
				seg.Ended = w.broken(ctx, wctx, err)
			}
			return seg
		}
		idle.Reset(w.idle)
		switch f.Type {
		case "ERROR":
			if f.Object.Code == http.StatusGone {
				seg.Ended = "410"
			} else {
				seg.Ended = fmt.Sprintf("error: ERROR event %d", f.Object.Code)
			}
			return seg
		case "BOOKMARK":
			seg.Events = append(seg.Events, Event{Type: f.Type, RV: f.Object.RV(), At: w.since()})
		default:
			o := f.Object
			seg.Events = append(seg.Events, Event{Type: f.Type, Key: o.Metadata.Name, RV: o.RV(), Value: o.Data["v"], UID: o.Metadata.UID, At: w.since()})
		}
	}
}

func (w *watcher) lastRelistRV() int64 {
	if len(w.relists) == 0 {
		return 0
	}
	return w.relists[len(w.relists)-1].RV
}

// broken says why a stream failed: the run ended, the watcher gave up on
// an idle stream, or an error.
func (w *watcher) broken(ctx, wctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return runEnded
	case wctx.Err() != nil:
		return "idle"
	}
	return "error: " + err.Error()
}
