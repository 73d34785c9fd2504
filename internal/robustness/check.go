package robustness

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is one broken guarantee, with the minimal history around it.
type Violation struct {
	Check   string   `json:"check"`
	Message string   `json:"message"`
	Context []string `json:"context,omitempty"`
}

func (v Violation) String() string {
	s := v.Check + ": " + v.Message
	for _, c := range v.Context {
		s += "\n    " + c
	}
	return s
}

func (e Event) String() string {
	if e.Type == "BOOKMARK" {
		return fmt.Sprintf("BOOKMARK rv %d", e.RV)
	}
	return fmt.Sprintf("%s %s rv %d v=%s uid %.8s", e.Type, e.Key, e.RV, e.Value, e.UID)
}

// stateAt is the namespace's ConfigMaps after every event up to rev.
func stateAt(history []Event, rev int64) map[string]Item {
	s := map[string]Item{}
	for _, e := range history {
		if e.RV > rev {
			break
		}
		if e.Type == "DELETED" {
			delete(s, e.Key)
		} else {
			s[e.Key] = Item{Value: e.Value, RV: e.RV, UID: e.UID}
		}
	}
	return s
}

func diffStates(got, want map[string]Item) []string {
	var out []string
	keys := slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, Item) bool) {
		for k, v := range got {
			if !yield(k, v) {
				return
			}
		}
		for k, v := range want {
			if !yield(k, v) {
				return
			}
		}
	})))
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case gok && !wok:
			out = append(out, fmt.Sprintf("%s: got %+v, etcd has none", k, g))
		case !gok && wok:
			out = append(out, fmt.Sprintf("%s: missing, etcd has %+v", k, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s: got %+v, etcd has %+v", k, g, w))
		}
	}
	return out
}

// around is the history events near rev, for a violation's context.
func around(history []Event, rev int64, n int) []string {
	i := sort.Search(len(history), func(i int) bool { return history[i].RV >= rev })
	var out []string
	for _, e := range history[max(0, i-n):min(len(history), i+n+1)] {
		out = append(out, "etcd: "+e.String())
	}
	return out
}

// checkWatches checks every watch segment against the history: ordered,
// unique, atomic, bookmarkable, reliable (no gap, nothing extra, same
// contents) and resumable (a segment from rv X starts with the first
// event after X).
//
// A revision may hold several events (the multi-key transactions,
// txnWriter): every event of every revision the segment covers is
// compared, by revision and key, whatever the order of the keys within
// the revision (etcd's order is the transaction's; a stream need not keep
// it). A segment that ends inside a revision, with some of its events
// sent and the rest not, breaks atomic and reliable both: the watcher
// resumes after that revision and never gets the rest.
func checkWatches(segs []Segment, history []Event) (vs []Violation, checked int) {
	byRev := map[int64][]Event{}
	for _, e := range history {
		byRev[e.RV] = append(byRev[e.RV], e)
	}
	for _, s := range segs {
		name := fmt.Sprintf("watcher %d on %s from rv %d (%s, %v-%v, ended %s)", s.Watcher, s.Server, s.From, map[bool]string{true: "resumed", false: "from a list"}[s.Resumed], s.Start.Round(time.Millisecond), s.End.Round(time.Millisecond), s.Ended)
		var got []Event
		last, lastBookmark := s.From, int64(0)
		seen := map[string]bool{}
		for i, e := range s.Events {
			ctx := func() []string {
				var c []string
				for _, x := range s.Events[max(0, i-3):min(len(s.Events), i+2)] {
					c = append(c, "stream: "+x.String())
				}
				return c
			}
			if e.Type == "BOOKMARK" {
				if e.RV < last || e.RV < lastBookmark {
					vs = append(vs, Violation{"bookmarkable", fmt.Sprintf("%s: bookmark rv %d before rv %d already sent", name, e.RV, max(last, lastBookmark)), ctx()})
				}
				lastBookmark = max(lastBookmark, e.RV)
				continue
			}
			checked++
			id := fmt.Sprintf("%d/%s", e.RV, e.Key)
			switch {
			case seen[id]:
				vs = append(vs, Violation{"unique", fmt.Sprintf("%s: event %s delivered twice", name, e), ctx()})
				continue
			case e.RV < last || e.RV <= s.From || e.RV < lastBookmark:
				vs = append(vs, Violation{"ordered", fmt.Sprintf("%s: event %s after rv %d", name, e, max(last, lastBookmark)), ctx()})
			}
			seen[id] = true
			last = max(last, e.RV)
			got = append(got, e)
		}
		// A segment cut by the client side — the harness at the end of the
		// run, its idle timer, or a broken connection (a fault between it
		// and the server, a server killed) — may stop between two events of
		// its last revision (the server may write a revision's events in
		// more than one flush, and the wire marks no revision's end, so a
		// client resuming from the last resourceVersion it saw loses the
		// rest whatever the server does): that revision, unless a bookmark
		// covered it, is left out, as if the cut came before it. An end
		// the server chose (its timeout, an ERROR event) inside a revision
		// is the server's, and checked.
		if n := len(got); cutByClient(s.Ended) && n > 0 && lastBookmark < got[n-1].RV && len(groupByRev(got)[got[n-1].RV]) < len(byRev[got[n-1].RV]) {
			l := got[n-1].RV
			for len(got) > 0 && got[len(got)-1].RV == l {
				got = got[:len(got)-1]
			}
			last = s.From
			if len(got) > 0 {
				last = max(s.From, got[len(got)-1].RV)
			}
		}
		end := max(last, lastBookmark)
		var want []Event
		for _, e := range history {
			if e.RV > s.From && e.RV <= end {
				want = append(want, e)
			}
		}
		// The keys of one revision in one order on both sides; got's
		// revisions stay in the order they came (ordered reports them).
		sortWithinRevisions(got)
		sortWithinRevisions(want)
		// Atomic: the events of one revision arrive together, all of them.
		gotByRev := groupByRev(got)
		for _, rev := range slices.Sorted(maps.Keys(gotByRev)) {
			if evs := gotByRev[rev]; len(evs) != len(byRev[rev]) && len(byRev[rev]) > 0 {
				var ctx []string
				for _, e := range byRev[rev] {
					ctx = append(ctx, "etcd: "+e.String())
				}
				for _, e := range evs {
					ctx = append(ctx, "stream: "+e.String())
				}
				vs = append(vs, Violation{"atomic", fmt.Sprintf("%s: %d of the %d events of rev %d", name, len(evs), len(byRev[rev]), rev), ctx})
			}
		}
		// Reliable and resumable: exactly the history's events.
		gi, wi := 0, 0
		for gi < len(got) || wi < len(want) {
			switch {
			case gi < len(got) && wi < len(want) && got[gi].RV == want[wi].RV && got[gi].Key == want[wi].Key:
				g, w := got[gi], want[wi]
				if g.Type != w.Type || g.Value != w.Value || g.UID != w.UID {
					vs = append(vs, Violation{"reliable", fmt.Sprintf("%s: event %s, etcd has %s", name, g, w), around(history, g.RV, 2)})
				}
				gi++
				wi++
			case wi < len(want) && (gi >= len(got) || byRevKey(want[wi], got[gi]) < 0):
				check, what := "reliable", "gap: missing"
				if gi == 0 {
					check, what = "resumable", "missing at the start:"
				}
				if !s.Resumed && gi == 0 {
					check = "reliable"
				}
				ctx := around(history, want[wi].RV, 2)
				for _, x := range got[max(0, gi-2):min(len(got), gi+2)] {
					ctx = append(ctx, "stream: "+x.String())
				}
				vs = append(vs, Violation{check, fmt.Sprintf("%s: %s %s (stream reached rv %d)", name, what, want[wi], end), ctx})
				wi++
			default:
				what := "is not in etcd's history"
				if g := got[gi]; slices.ContainsFunc(byRev[g.RV], func(e Event) bool { return e.Key == g.Key }) {
					what = fmt.Sprintf("is outside the segment's span (rv %d, %d]", s.From, end)
				}
				vs = append(vs, Violation{"reliable", fmt.Sprintf("%s: event %s %s", name, got[gi], what), around(history, got[gi].RV, 2)})
				gi++
			}
		}
	}
	return vs, checked
}

// byRevKey orders events by revision, then key.
func byRevKey(a, b Event) int {
	if c := cmp.Compare(a.RV, b.RV); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// sortWithinRevisions sorts each run of events of one revision by key.
func sortWithinRevisions(evs []Event) {
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].RV == evs[i].RV {
			j++
		}
		slices.SortStableFunc(evs[i:j], func(a, b Event) int { return cmp.Compare(a.Key, b.Key) })
		i = j
	}
}

func groupByRev(evs []Event) map[int64][]Event {
	m := map[int64][]Event{}
	for _, e := range evs {
		m[e.RV] = append(m[e.RV], e)
	}
	return m
}

// checkRelists checks that every list a watcher started from matches the
// history at its resourceVersion, and that every 410 was followed by a
// relist (convergence: the relist's state is etcd's at its rv, and the
// watch from it is checked like any other).
func checkRelists(relists []Relist, segs []Segment, history []Event, runEnd time.Duration) (vs []Violation) {
	for _, r := range relists {
		if d := diffStates(r.Items, stateAt(history, r.RV)); len(d) > 0 {
			vs = append(vs, Violation{"relist", fmt.Sprintf("watcher %d's list on %s at rv %d (after 410: %v) differs from etcd's state", r.Watcher, r.Server, r.RV, r.After410), d})
		}
	}
	for _, s := range segs {
		if s.Ended != "410" || s.End > runEnd-2*time.Second {
			continue
		}
		ok := false
		for _, r := range relists {
			if r.Watcher == s.Watcher && r.After410 && r.At >= s.End {
				ok = true
				break
			}
		}
		if !ok {
			vs = append(vs, Violation{"relist", fmt.Sprintf("watcher %d got 410 on %s at %v, and no relist followed", s.Watcher, s.Server, s.End), nil})
		}
	}
	return vs
}

// checkPagedLists checks that the pages of one list are of one snapshot:
// the same resourceVersion, together etcd's state at it.
func checkPagedLists(lists []PagedList, history []Event) (vs []Violation, complete, gone int) {
	for _, l := range lists {
		if l.Code == http.StatusGone {
			gone++
			if l.After410 {
				vs = append(vs, Violation{"relist", fmt.Sprintf("client %d's full list on %s at %v, after a 410 of its paged list, got 410 too", l.Client, l.Server, l.Return), nil})
			}
		}
		if l.Code != http.StatusOK {
			continue
		}
		complete++
		for _, rv := range l.PageRV {
			if rv != l.RV {
				vs = append(vs, Violation{"paginated list", fmt.Sprintf("client %d's list on %s: pages at rvs %v", l.Client, l.Server, l.PageRV), nil})
				break
			}
		}
		if d := diffStates(l.Items, stateAt(history, l.RV)); len(d) > 0 {
			vs = append(vs, Violation{"paginated list", fmt.Sprintf("client %d's list on %s at rv %d (%v-%v) differs from etcd's state", l.Client, l.Server, l.RV, l.Call, l.Return), d})
		}
	}
	return vs, complete, gone
}

// checkAcknowledged checks that every acknowledged write is in etcd's
// history (and so, by the watch checks, in every stream that covers it),
// and that the final state each server lists is etcd's.
func checkAcknowledged(ops []Op, history []Event, final map[string]map[string]Item) (vs []Violation, acked int) {
	at := map[string]Event{} // rv/key
	deleted := map[string]bool{}
	for _, e := range history {
		at[fmt.Sprintf("%d/%s", e.RV, e.Key)] = e
		if e.Type == "DELETED" {
			deleted[e.Key+"/"+e.UID] = true
		}
	}
	for _, op := range ops {
		switch {
		case op.Out.Code == http.StatusOK && op.In.Kind == OpDelete:
			acked++
			if !deleted[op.In.Key+"/"+op.Out.UID] {
				vs = append(vs, Violation{"acknowledged write", fmt.Sprintf("client %d's delete of %s (uid %.8s) on %s at %v answered 200; etcd's history has no such delete", op.Client, op.In.Key, op.Out.UID, op.Server, op.Call), nil})
			}
		case op.Out.Code == http.StatusOK && op.In.Kind == OpUpdate, op.Out.Code == http.StatusCreated:
			acked++
			e, ok := at[fmt.Sprintf("%d/%s", op.Out.RV, op.In.Key)]
			if !ok || e.Value != op.In.Value || e.Type == "DELETED" {
				vs = append(vs, Violation{"acknowledged write", fmt.Sprintf("client %d's %s of %s = %s on %s at %v answered rv %d; etcd's history has not that write", op.Client, op.In.Kind, op.In.Key, op.In.Value, op.Server, op.Call, op.Out.RV), around(history, op.Out.RV, 2)})
			}
		}
	}
	want := stateAt(history, math.MaxInt64)
	for _, srv := range slices.Sorted(maps.Keys(final)) {
		if d := diffStates(final[srv], want); len(d) > 0 {
			vs = append(vs, Violation{"final state", "a consistent list from " + srv + " after the run differs from etcd's state", d})
		}
	}
	return vs, acked
}

// checkLinearizable checks the single-object operations with porcupine;
// on failure it writes the visualization to path.
func checkLinearizable(ops []Op, timeout time.Duration, path string) (porcupine.CheckResult, []Violation, error) {
	var history []porcupine.Operation
	for _, op := range ops {
		ret := op.Return.Nanoseconds()
		if op.Out.Code == 0 {
			ret = math.MaxInt64 // may have happened, at any time after its call
		}
		history = append(history, porcupine.Operation{ClientId: op.Client, Input: op.In, Output: op.Out, Call: op.Call.Nanoseconds(), Return: ret, Metadata: op.Server})
	}
	res, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	if res == porcupine.Ok {
		return res, nil, nil
	}
	err := porcupine.VisualizePath(Model, info, path)
	msg := fmt.Sprintf("%d operations are not linearizable", len(history))
	if res == porcupine.Unknown {
		msg = fmt.Sprintf("porcupine could not decide within %v whether %d operations are linearizable", timeout, len(history))
	}
	return res, []Violation{{"linearizable", msg + "; the visualization shows each key's longest linearizable prefix: " + path, unknownCounts(ops)}}, err
}

// unknownCounts names, per key, the operations without a definite
// answer: the checker's search grows with them.
func unknownCounts(ops []Op) []string {
	var out []string
	unknown := map[string]int{}
	for _, op := range ops {
		if op.Out.Code == 0 {
			unknown[op.In.Key]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(unknown)) {
		out = append(out, fmt.Sprintf("%s: %d operations without a definite answer", k, unknown[k]))
	}
	return out
}

// LeaderSample is one poll of a server's objwatch_gc_leader metric: the
// server's answer holds at some instant between Call and Return.
type LeaderSample struct {
	Server string        `json:"server"`
	Call   time.Duration `json:"call"`
	Return time.Duration `json:"return"`
	Leader bool          `json:"leader"`
	OK     bool          `json:"ok"`
}

// Pause is a time a server was SIGSTOPped: it did nothing, leader or not.
type Pause struct {
	Server     string
	Stop, Cont time.Duration
}

// Span is a run of samples of one server that all said it leads, with no
// pause of the server within it. Inner is what they prove, assuming the
// server did not lose and regain the lease between two samples: leader
// from the first sample's return to the last one's call (empty for a
// single sample). AfterPause: the span's first sample is the server's
// first after a SIGCONT.
type Span struct {
	Server     string         `json:"server"`
	Samples    []LeaderSample `json:"-"`
	From       time.Duration  `json:"from"` // inner bound
	To         time.Duration  `json:"to"`
	AfterPause time.Duration  `json:"afterPause,omitempty"`
}

// leaderSpans builds the spans. A sample sent while its server was
// paused was answered after the SIGCONT, so it counts from then.
func leaderSpans(samples []LeaderSample, pauses []Pause) []Span {
	bySrv := map[string][]LeaderSample{}
	for _, s := range samples {
		bySrv[s.Server] = append(bySrv[s.Server], s)
	}
	var spans []Span
	for _, srv := range slices.Sorted(maps.Keys(bySrv)) {
		ss := bySrv[srv]
		sort.Slice(ss, func(i, j int) bool { return ss[i].Call < ss[j].Call })
		var cur *Span
		end := func() {
			if cur != nil {
				cur.From, cur.To = cur.Samples[0].Return, cur.Samples[len(cur.Samples)-1].Call
				spans = append(spans, *cur)
				cur = nil
			}
		}
		prevCall := time.Duration(-1)
		for _, s := range ss {
			resumed, paused := time.Duration(0), false
			for _, p := range pauses {
				if p.Server != srv {
					continue
				}
				if s.Call < p.Cont && s.Return > p.Stop {
					s.Call = max(s.Call, p.Cont) // answered after the SIGCONT
				}
				if p.Cont > prevCall && p.Cont <= s.Call && p.Stop < s.Call {
					paused = true // the first sample since the pause: it ends a span
				}
				if p.Cont <= s.Call && s.Call < p.Cont+staleLeaderLimit {
					resumed = p.Cont // a span starting here is after the pause
				}
			}
			prevCall = s.Call
			if paused {
				end()
			}
			if resumed != 0 && cur == nil && s.OK && s.Leader {
				cur = &Span{Server: srv, AfterPause: resumed}
			}
			switch {
			case !s.OK:
			case s.Leader && cur == nil:
				cur = &Span{Server: srv}
				cur.Samples = append(cur.Samples, s)
			case s.Leader:
				cur.Samples = append(cur.Samples, s)
			default:
				end()
			}
		}
		end()
	}
	return spans
}

// staleLeaderLimit bounds how long a server resumed from a pause may go
// on reporting itself the collector's leader after another took the lease
// over: its elector's next renewal (every lease duration / 7) finds the
// other holder and stops the collector.
const staleLeaderLimit = time.Second

// checkLeaders checks the garbage collector's single-leader rule: no two
// servers led at once. Two spans overlap when their inner bounds do, or
// when a sample of one, whole, falls in the other's inner bound.
//
// One overlap is expected, and reported as a finding, not a violation: a
// leader that was paused (SIGSTOP) past its lease finds, when it resumes,
// that another server took the lease over, but until its elector's next
// renewal its collector still runs (lifecycle/elect.go: "the task must
// still tolerate a short overlap"; every action the collector takes is
// conditional). That is a span that starts at the SIGCONT and overlaps
// for less than staleLeaderLimit.
func checkLeaders(samples []LeaderSample, leases []LeaseRecord, pauses []Pause) (vs, findings []Violation, spans []Span) {
	spans = leaderSpans(samples, pauses)
	overlap := func(a, b Span) (from, to time.Duration, ok bool) {
		if from, to = max(a.From, b.From), min(a.To, b.To); from < to {
			return from, to, true
		}
		for _, s := range a.Samples {
			if s.Call >= b.From && s.Return <= b.To {
				return s.Call, s.Return, true
			}
		}
		return 0, 0, false
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.Server == b.Server {
				continue
			}
			from, to, ok := overlap(a, b)
			if !ok {
				from, to, ok = overlap(b, a)
			}
			if !ok {
				continue
			}
			var ctx []string
			for _, l := range leases {
				if l.At > from-3*time.Second && l.At < to+time.Second {
					ctx = append(ctx, fmt.Sprintf("lease: rev %d at %v holder %s", l.Rev, l.At.Round(time.Millisecond), l.Holder))
				}
			}
			for _, sp := range []Span{a, b} {
				for _, s := range sp.Samples {
					if s.Return > from-500*time.Millisecond && s.Call < to+500*time.Millisecond {
						ctx = append(ctx, fmt.Sprintf("sample: %s leader between %v and %v", sp.Server, s.Call.Round(time.Millisecond), s.Return.Round(time.Millisecond)))
					}
				}
			}
			for _, p := range pauses {
				if p.Cont > from-5*time.Second && p.Stop < to {
					ctx = append(ctx, fmt.Sprintf("paused: %s from %v to %v", p.Server, p.Stop.Round(time.Millisecond), p.Cont.Round(time.Millisecond)))
				}
			}
			v := Violation{"gc leader", fmt.Sprintf("%s (leader %v-%v) and %s (leader %v-%v) both ran the garbage collector, %v-%v",
				a.Server, a.Samples[0].Call.Round(time.Millisecond), a.Samples[len(a.Samples)-1].Return.Round(time.Millisecond),
				b.Server, b.Samples[0].Call.Round(time.Millisecond), b.Samples[len(b.Samples)-1].Return.Round(time.Millisecond),
				from.Round(time.Millisecond), to.Round(time.Millisecond)), ctx}
			stale := a.AfterPause != 0 && a.AfterPause >= b.From-time.Millisecond && to-a.AfterPause < staleLeaderLimit ||
				b.AfterPause != 0 && b.AfterPause >= a.From-time.Millisecond && to-b.AfterPause < staleLeaderLimit
			if stale {
				v.Check = "gc leader after pause"
				findings = append(findings, v)
			} else {
				vs = append(vs, v)
			}
		}
	}
	return vs, findings, spans
}

// checkTxns checks that every multi-key transaction etcd answered is in
// the history whole: at its revision exactly its events, each put with
// its value and uid (ADDED or MODIFIED), each delete with the deleted
// uid. It returns the violations and the number of committed
// transactions.
func checkTxns(txns []Txn, history []Event) (vs []Violation, committed int) {
	byRev := groupByRev(history)
	for _, t := range txns {
		if t.Rev == 0 {
			continue
		}
		committed++
		got := map[string]Event{}
		for _, e := range byRev[t.Rev] {
			got[e.Key] = e
		}
		var bad []string
		for _, p := range t.Ops {
			e, ok := got[p.Key]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s: not in etcd's history", p.Key))
			case p.Delete && (e.Type != "DELETED" || e.UID != p.UID):
				bad = append(bad, fmt.Sprintf("%s: delete of uid %.8s; etcd has %s", p.Key, p.UID, e))
			case !p.Delete && (e.Type == "DELETED" || e.Value != p.Value || e.UID != p.UID):
				bad = append(bad, fmt.Sprintf("%s: put of %s uid %.8s; etcd has %s", p.Key, p.Value, p.UID, e))
			}
			delete(got, p.Key)
		}
		for _, k := range slices.Sorted(maps.Keys(got)) {
			bad = append(bad, fmt.Sprintf("etcd has %s, not written by the transaction", got[k]))
		}
		if len(bad) > 0 {
			vs = append(vs, Violation{"acknowledged write", fmt.Sprintf("the multi-key transaction at %v answered rev %d with %d operations; etcd's history differs", t.Call, t.Rev, len(t.Ops)), bad})
		}
	}
	return vs, committed
}

// cutByClient reports whether a segment that ended so was cut on the
// client's side of the wire (see checkWatches).
func cutByClient(ended string) bool {
	switch {
	case ended == runEnded, ended == "idle":
		return true
	case strings.HasPrefix(ended, "error: ERROR event"), strings.HasPrefix(ended, "error: HTTP"):
		return false
	}
	return strings.HasPrefix(ended, "error: ")
}
