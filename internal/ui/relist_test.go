package ui_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// TestLiveRelistNote: when the page's watch is cut and the server has
// forgotten its resourceVersion by the time it resumes (410 Gone: a
// server that compacts every 300ms and keeps 300ms of events), the hub
// relists and the stream, over HTTP and on the page, carries the note
// saying so, then the changes the relist found. (No history store here:
// with one, which sets the compactor's floor, the resumed watch was not
// answered 410 within this test's waits.)
func TestLiveRelistNote(t *testing.T) {
	ctx := browser(t)
	e := startUIWith(t, uiSetup{env: []testenv.Option{testenv.WithHistory(300 * time.Millisecond)}, proxy: true})
	e.createCM(t, "default", "app", map[string]any{"mode": "slow"})
	s := e.openLive(t, url.Values{"resource": {"configmaps"}, "namespace": {"default"}}, "")
	s.ready(t)
	e.login(t, ctx, "/live?resource=configmaps&namespace=default")
	poll(t, ctx, "the stream ready", `document.getElementById("status").textContent.startsWith("watching")`, 10*time.Second)

	// Cut the hub's watch; change things while it cannot see them; wait
	// until they are compacted away.
	e.proxy.cut()
	e.patchCM(t, "default", "app", `{"data":{"mode":"fast"}}`)
	e.createCM(t, "default", "new", map[string]any{"k": "v"})
	time.Sleep(1500 * time.Millisecond)
	e.patchCM(t, "default", "new", `{"data":{"k":"w"}}`) // a write after the compaction
	time.Sleep(700 * time.Millisecond)
	e.proxy.mend()

	note := s.next(t, 20*time.Second)
	if note.ev.Type != "NOTE" || !strings.Contains(note.ev.Note, "configmaps: resourceVersion ") ||
		!strings.Contains(note.ev.Note, "expired (410 Gone); relisted 2 objects, found 2 changes") {
		t.Fatalf("first event after the cut = %s %q, want the relist note", note.ev.Type, note.ev.Note)
	}
	var got []string
	for range 2 {
		ev := s.next(t, 5*time.Second).ev
		got = append(got, fmt.Sprintf("%s %s %d", ev.Type, ev.Name, len(ev.Changes)))
	}
	if strings.Join(got, ",") != "MODIFIED app 1,ADDED new 0" {
		t.Fatalf("after the note: %q, want app's change and new's creation", got)
	}
	poll(t, ctx, "the relist note", `[...document.querySelectorAll("#events li.NOTE")].some(li => li.textContent.includes("expired (410 Gone); relisted 2 objects, found 2 changes"))`, 10*time.Second)
	if rows := eval[string](t, ctx, `[...document.querySelectorAll("#events li")].map(li => li.className).join(",")`); rows != "ADDED,MODIFIED,NOTE" {
		t.Fatalf("rows newest first = %q, want ADDED,MODIFIED,NOTE", rows)
	}
	// The watch works again after the relist.
	e.patchCM(t, "default", "app", `{"data":{"mode":"slow"}}`)
	if ev := s.next(t, 5*time.Second).ev; ev.Type != "MODIFIED" || ev.Name != "app" {
		t.Fatalf("after the relist: %+v", ev)
	}
}
