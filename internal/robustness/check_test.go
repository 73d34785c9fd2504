package robustness

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The checks on small made-up histories: each must report what it is
// for, and nothing on a correct history.

func ev(typ, key string, rv int64, v string) Event {
	return Event{Type: typ, Key: key, RV: rv, Value: v, UID: "u-" + key}
}

func checks(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Check)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestCheckWatches(t *testing.T) {
	history := []Event{ev("ADDED", "a", 2, "1"), ev("ADDED", "b", 3, "1"), ev("MODIFIED", "a", 4, "2"), ev("DELETED", "b", 5, "1"), ev("MODIFIED", "a", 6, "3")}
	bm := func(rv int64) Event { return Event{Type: "BOOKMARK", RV: rv} }
	for _, tc := range []struct {
		name    string
		seg     Segment
		want    []string
		checked int
	}{
		{"whole", Segment{From: 1, Events: []Event{history[0], history[1], bm(3), history[2], history[3], history[4], bm(6)}}, nil, 5},
		{"resumed", Segment{From: 3, Resumed: true, Events: []Event{history[2], history[3]}}, nil, 2},
		{"bookmark covers the end", Segment{From: 4, Resumed: true, Events: []Event{history[3], bm(5)}}, nil, 1},
		{"gap", Segment{From: 1, Events: []Event{history[0], history[2]}}, []string{"reliable"}, 2},
		{"gap before a bookmark", Segment{From: 1, Events: []Event{history[0], bm(3)}}, []string{"reliable"}, 1},
		{"resumed late", Segment{From: 3, Resumed: true, Events: []Event{history[3]}}, []string{"resumable"}, 1},
		{"duplicate", Segment{From: 1, Events: []Event{history[0], history[0], history[1]}}, []string{"unique"}, 3},
		{"reordered", Segment{From: 1, Events: []Event{history[1], history[0]}}, []string{"ordered", "reliable"}, 2},
		{"bookmark back", Segment{From: 1, Events: []Event{history[0], history[1], bm(2)}}, []string{"bookmarkable"}, 2},
		{"wrong value", Segment{From: 1, Events: []Event{ev("ADDED", "a", 2, "x")}}, []string{"reliable"}, 1},
		{"invented", Segment{From: 6, Resumed: true, Events: []Event{ev("MODIFIED", "a", 7, "4")}}, []string{"reliable"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, n := checkWatches([]Segment{tc.seg}, history)
			if got := checks(vs); !slices.Equal(got, tc.want) || n != tc.checked {
				t.Errorf("checkWatches = %v (%d checked), want %v (%d): %v", got, n, tc.want, tc.checked, vs)
			}
		})
	}
}

func TestCheckAcknowledged(t *testing.T) {
	history := []Event{ev("ADDED", "a", 2, "1"), ev("MODIFIED", "a", 3, "2"), ev("DELETED", "a", 4, "2")}
	ok := []Op{
		{In: Input{Kind: OpCreate, Key: "a", Value: "1"}, Out: Output{Code: 201, RV: 2}},
		{In: Input{Kind: OpUpdate, Key: "a", Value: "2", RV: 2}, Out: Output{Code: 200, RV: 3}},
		{In: Input{Kind: OpDelete, Key: "a"}, Out: Output{Code: 200, UID: "u-a"}},
		{In: Input{Kind: OpUpdate, Key: "a", Value: "9"}}, // no answer: may not have happened
	}
	if vs, n := checkAcknowledged(ok, history, map[string]map[string]Item{"s": {}}); len(vs) > 0 || n != 3 {
		t.Errorf("checkAcknowledged(correct) = %v, %d acknowledged", vs, n)
	}
	lost := append(ok, Op{In: Input{Kind: OpUpdate, Key: "a", Value: "3"}, Out: Output{Code: 200, RV: 5}})
	if vs, _ := checkAcknowledged(lost, history, map[string]map[string]Item{"s": {"a": {Value: "3", RV: 5}}}); !slices.Equal(checks(vs), []string{"acknowledged write", "final state"}) {
		t.Errorf("checkAcknowledged(lost write, stale final state) = %v", vs)
	}
}

func TestCheckLeaders(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	sample := func(srv string, at int, leader bool) LeaderSample {
		return LeaderSample{Server: srv, Call: ms(at), Return: ms(at + 10), Leader: leader, OK: true}
	}
	run := func(srv string, from, to int, leader bool) []LeaderSample {
		var out []LeaderSample
		for at := from; at < to; at += 100 {
			out = append(out, sample(srv, at, leader))
		}
		return out
	}
	handover := slices.Concat(run("a", 0, 1000, true), run("a", 1000, 3000, false), run("b", 0, 1100, false), run("b", 1100, 3000, true))
	if vs, fs, spans := checkLeaders(handover, nil, nil); len(vs)+len(fs) > 0 || len(spans) != 2 {
		t.Errorf("checkLeaders(handover) = %v, %v, %d spans", vs, fs, len(spans))
	}
	both := slices.Concat(run("a", 0, 2000, true), run("b", 0, 1000, false), run("b", 1000, 3000, true))
	if vs, _, _ := checkLeaders(both, nil, nil); !slices.Equal(checks(vs), []string{"gc leader"}) {
		t.Errorf("checkLeaders(both) = %v", vs)
	}
	// a is paused from 1000 to 2500; b takes over at 2000; a answers one
	// sample, sent while paused, as leader after the SIGCONT, then steps
	// down: a finding, not a violation.
	paused := slices.Concat(run("a", 0, 1000, true), []LeaderSample{{Server: "a", Call: ms(1100), Return: ms(2510), Leader: true, OK: true}}, run("a", 2600, 4000, false),
		run("b", 0, 2000, false), run("b", 2000, 4000, true))
	vs, fs, _ := checkLeaders(paused, nil, []Pause{{Server: "a", Stop: ms(1000), Cont: ms(2500)}})
	if len(vs) > 0 || !slices.Equal(checks(fs), []string{"gc leader after pause"}) {
		t.Errorf("checkLeaders(paused) = %v, findings %v", vs, fs)
	}
	// The same, with a's first sample sent 100 ms after the SIGCONT.
	paused = slices.Concat(run("a", 0, 1000, true), run("a", 2600, 2700, true), run("a", 2700, 4000, false), run("b", 0, 2000, false), run("b", 2000, 4000, true))
	vs, fs, _ = checkLeaders(paused, nil, []Pause{{Server: "a", Stop: ms(1000), Cont: ms(2500)}})
	if len(vs) > 0 || !slices.Equal(checks(fs), []string{"gc leader after pause"}) {
		t.Errorf("checkLeaders(paused, sampled after) = %v, findings %v", vs, fs)
	}
	// The same, with samples failing (timing out) during the pause.
	var timedOut []LeaderSample
	for at := 1000; at < 2500; at += 600 {
		timedOut = append(timedOut, LeaderSample{Server: "a", Call: ms(at), Return: ms(at + 500)})
	}
	paused = slices.Concat(run("a", 0, 1000, true), timedOut, []LeaderSample{{Server: "a", Call: ms(2200), Return: ms(2520), Leader: true, OK: true}}, run("a", 2600, 4000, false),
		run("b", 0, 2000, false), run("b", 2000, 4000, true))
	vs, fs, _ = checkLeaders(paused, nil, []Pause{{Server: "a", Stop: ms(1000), Cont: ms(2500)}})
	if len(vs) > 0 || !slices.Equal(checks(fs), []string{"gc leader after pause"}) {
		t.Errorf("checkLeaders(paused, samples timing out) = %v, findings %v", vs, fs)
	}
	// A leader that goes on past another's takeover without a pause is a
	// violation however short.
	stale := slices.Concat(run("a", 0, 2200, true), run("a", 2200, 4000, false), run("b", 0, 2000, false), run("b", 2000, 4000, true))
	if vs, _, _ := checkLeaders(stale, nil, []Pause{{Server: "a", Stop: ms(100), Cont: ms(200)}}); !slices.Equal(checks(vs), []string{"gc leader"}) {
		t.Errorf("checkLeaders(stale, unpaused) = %v", vs)
	}
}

func TestCheckPagedLists(t *testing.T) {
	history := []Event{ev("ADDED", "a", 2, "1"), ev("ADDED", "b", 3, "1"), ev("MODIFIED", "a", 4, "2")}
	at3 := map[string]Item{"a": {Value: "1", RV: 2, UID: "u-a"}, "b": {Value: "1", RV: 3, UID: "u-b"}}
	good := PagedList{RV: 3, PageRV: []int64{3, 3}, Items: at3, Code: 200}
	if vs, n, _ := checkPagedLists([]PagedList{good}, history); len(vs) > 0 || n != 1 {
		t.Errorf("checkPagedLists(good) = %v, %d", vs, n)
	}
	mixed := good
	mixed.PageRV = []int64{3, 4}
	mixed.Items = map[string]Item{"a": {Value: "2", RV: 4, UID: "u-a"}, "b": at3["b"]}
	if vs, _, _ := checkPagedLists([]PagedList{mixed}, history); len(vs) != 2 {
		t.Errorf("checkPagedLists(pages of two snapshots) = %v", vs)
	}
}

// TestCheckWatchesMultiKey: revisions of several events (the multi-key
// transactions) are compared whole: every event, in any key order.
func TestCheckWatchesMultiKey(t *testing.T) {
	history := []Event{
		ev("ADDED", "a", 2, "1"),
		ev("ADDED", "m1", 3, "t1"), ev("ADDED", "m0", 3, "t2"), ev("ADDED", "m2", 3, "t3"),
		ev("MODIFIED", "a", 4, "2"),
		ev("DELETED", "m1", 5, "t1"), ev("DELETED", "m2", 5, "t3"),
		ev("MODIFIED", "a", 6, "3"),
	}
	bm := func(rv int64) Event { return Event{Type: "BOOKMARK", RV: rv} }
	for _, tc := range []struct {
		name    string
		seg     Segment
		want    []string
		missing int // events reported missing
	}{
		{"whole", Segment{From: 1, Events: slices.Clone(history)}, nil, 0},
		{"keys reordered within a revision", Segment{From: 1, Events: []Event{history[0], history[3], history[1], history[2], history[4], history[6], history[5]}}, nil, 0},
		{"resumed after a whole revision", Segment{From: 3, Resumed: true, Events: history[4:]}, nil, 0},
		{"second event of a revision dropped", Segment{From: 1, Events: []Event{history[0], history[1], history[3], history[4]}}, []string{"atomic", "reliable"}, 1},
		{"last event of a revision dropped", Segment{From: 4, Resumed: true, Events: []Event{history[5], history[7]}}, []string{"atomic", "reliable"}, 1},
		{"ended inside a revision", Segment{From: 1, Events: []Event{history[0], history[1]}}, []string{"atomic", "reliable"}, 2},
		{"bookmark inside a revision's events", Segment{From: 1, Events: []Event{history[0], history[1], bm(3)}}, []string{"atomic", "reliable"}, 2},
		{"resumed inside a revision", Segment{From: 3, Resumed: true, Events: []Event{history[2], history[3], history[4]}}, []string{"atomic", "ordered", "reliable"}, 0},
		{"cut by the harness inside a revision", Segment{From: 1, Ended: runEnded, Events: []Event{history[0], history[1]}}, nil, 0},
		{"cut by the harness after a bookmark inside a revision", Segment{From: 1, Ended: runEnded, Events: []Event{history[0], history[1], bm(3)}}, []string{"atomic", "reliable"}, 2},
		{"ended by the server inside a revision", Segment{From: 1, Ended: "timeout", Events: []Event{history[0], history[1]}}, []string{"atomic", "reliable"}, 2},
		{"connection broken inside a revision", Segment{From: 1, Ended: "error: unexpected EOF", Events: []Event{history[0], history[1]}}, nil, 0},
		{"ERROR event inside a revision", Segment{From: 1, Ended: "error: ERROR event 500", Events: []Event{history[0], history[1]}}, []string{"atomic", "reliable"}, 2},
		{"one key's value wrong", Segment{From: 1, Events: []Event{history[0], history[1], ev("ADDED", "m0", 3, "x"), history[3]}}, []string{"reliable"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, _ := checkWatches([]Segment{tc.seg}, history)
			if got := checks(vs); !slices.Equal(got, tc.want) {
				t.Errorf("checkWatches = %v, want %v: %v", got, tc.want, vs)
			}
			missing := 0
			for _, v := range vs {
				if strings.Contains(v.Message, "not in etcd's history") {
					t.Errorf("an event of etcd's history reported as not in it: %v", v)
				}
				if strings.Contains(v.Message, "missing") {
					missing++
				}
			}
			if missing != tc.missing {
				t.Errorf("%d events reported missing, want %d: %v", missing, tc.missing, vs)
			}
		})
	}
}

func TestCheckTxns(t *testing.T) {
	history := []Event{
		ev("ADDED", "m0", 3, "t1"), ev("ADDED", "m1", 3, "t2"),
		ev("MODIFIED", "m0", 4, "t3"), ev("DELETED", "m1", 4, "t2"),
	}
	put := func(k, v string) TxnPut { return TxnPut{Key: k, Value: v, UID: "u-" + k} }
	ok := []Txn{
		{Rev: 3, Ops: []TxnPut{put("m0", "t1"), put("m1", "t2")}},
		{Rev: 4, Ops: []TxnPut{put("m0", "t3"), {Key: "m1", UID: "u-m1", Delete: true}}},
		{Ops: []TxnPut{put("m2", "t9")}, Err: "context deadline exceeded"}, // may not have happened
	}
	if vs, n := checkTxns(ok, history); len(vs) > 0 || n != 2 {
		t.Errorf("checkTxns(correct) = %v, %d committed", vs, n)
	}
	for name, txn := range map[string]Txn{
		"one key missing":   {Rev: 3, Ops: []TxnPut{put("m0", "t1"), put("m1", "t2"), put("m2", "t0")}},
		"a key not written": {Rev: 3, Ops: []TxnPut{put("m0", "t1")}},
		"wrong value":       {Rev: 4, Ops: []TxnPut{put("m0", "t4"), {Key: "m1", UID: "u-m1", Delete: true}}},
		"put, not delete":   {Rev: 4, Ops: []TxnPut{put("m0", "t3"), put("m1", "t2")}},
		"lost":              {Rev: 7, Ops: []TxnPut{put("m0", "t5"), put("m1", "t6")}},
	} {
		if vs, _ := checkTxns([]Txn{txn}, history); !slices.Equal(checks(vs), []string{"acknowledged write"}) {
			t.Errorf("checkTxns(%s) = %v", name, vs)
		}
	}
}
