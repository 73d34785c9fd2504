package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/internal/ui"
)

// noHistoryEnv is a page over a server that has no history
// subresource (objwatch behind a proxy answering .../history 404, as
// kube-apiserver does), with app written by the managers "test" and
// "tuner". (objwatch itself always has one: with --history=false it is
// etcd's history; TestObjectPageWithoutHistoryStore.)
func noHistoryEnv(t *testing.T) *uiEnv {
	e := startUIWith(t, uiSetup{kubeHistory: true})
	e.createCM(t, "default", "app", map[string]any{"mode": "slow"})
	e.patchCMAs(t, "tuner", "default", "app", `{"data":{"size":"5"}}`)
	return e
}

// TestObjectPageWithoutHistory: over HTTP, an object page the server
// gives no history for says why (HistoryMissing), has no revisions, and
// still blames each field on its field manager.
func TestObjectPageWithoutHistory(t *testing.T) {
	e := noHistoryEnv(t)
	var page ui.ObjectPage
	e.getJSON(t, "/api/object", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"app"}}, &page)
	if !page.Exists || len(page.Revisions) != 0 || len(page.HistoryNotes) != 0 {
		t.Fatalf("page = exists %v, %d revisions, notes %q", page.Exists, len(page.Revisions), page.HistoryNotes)
	}
	if !strings.Contains(page.HistoryMissing, "this server has no history of objects, or you may not read it") ||
		!strings.Contains(page.HistoryMissing, "Blame shows field managers only") {
		t.Fatalf("historyMissing = %q", page.HistoryMissing)
	}
	byText := map[string]string{}
	for _, l := range page.Blame {
		byText[strings.TrimSpace(l.Text)] = l.Note
	}
	if n := byText["mode: slow"]; !strings.Contains(n, "test") {
		t.Errorf("mode: slow blamed on %q, want the manager test (blame %+v)", n, page.Blame)
	}
	if n := byText["size: \"5\""]; !strings.Contains(n, "tuner") {
		t.Errorf(`size: "5" blamed on %q, want the manager tuner (blame %+v)`, n, page.Blame)
	}
	// A diff needs a history: the page's endpoint says so with the
	// server's 404.
	resp, err := e.web.Get(e.url("/api/diff", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"app"}, "from": {"1"}, "to": {"2"}}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("diff without history: %s, want 404", resp.Status)
	}
}

// TestObjectPageWithoutHistoryStore: objwatch serve --history=false (no
// history store) still answers an object's history, from etcd, without
// authors; the page says where it comes from and blames fields on their
// managers.
func TestObjectPageWithoutHistoryStore(t *testing.T) {
	e := startUIWith(t, uiSetup{})
	e.createCM(t, "default", "app", map[string]any{"mode": "slow"})
	e.patchCMAs(t, "tuner", "default", "app", `{"data":{"size":"5"}}`)
	var page ui.ObjectPage
	e.getJSON(t, "/api/object", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"app"}}, &page)
	if page.HistoryMissing != "" || len(page.Revisions) != 2 {
		t.Fatalf("historyMissing %q, %d revisions; want etcd's 2", page.HistoryMissing, len(page.Revisions))
	}
	notes := strings.Join(page.HistoryNotes, "\n")
	if !strings.Contains(notes, "from etcd's own history (this server keeps no history store") || !strings.Contains(notes, "authors unknown") {
		t.Fatalf("notes = %q", page.HistoryNotes)
	}
	for _, r := range page.Revisions {
		if r.Author != nil {
			t.Errorf("revision %s has author %+v without a store or an audit log", r.ResourceVersion, r.Author)
		}
	}
	byText := map[string]string{}
	for _, l := range page.Blame {
		byText[strings.TrimSpace(l.Text)] = l.Note
	}
	if !strings.Contains(byText["mode: slow"], "test") || !strings.Contains(byText[`size: "5"`], "tuner") {
		t.Fatalf("blame = %+v; want mode by test, size by tuner", page.Blame)
	}
}

// TestBrowserObjectWithoutHistory: the object page shows the
// HistoryMissing message, no revision, no diff button, and the blame
// gutter with the field managers.
func TestBrowserObjectWithoutHistory(t *testing.T) {
	ctx := browser(t)
	e := noHistoryEnv(t)
	e.login(t, ctx, "/object?resource=configmaps&namespace=default&name=app")
	poll(t, ctx, "the blame", `document.querySelectorAll("#blame tr").length > 0`, 10*time.Second)
	msg := eval[string](t, ctx, `(document.getElementById("history-missing") || {}).textContent || ""`)
	if !strings.Contains(msg, "this server has no history of objects") || !strings.Contains(msg, "Blame shows field managers only") {
		t.Fatalf("history message = %q", msg)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#history ol.revs li").length + document.querySelectorAll("#diff-button").length`); n != 0 {
		t.Fatalf("%d revisions or diff buttons on a page without history", n)
	}
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll("#blame tr")].map(r => r.cells[0].textContent + "|" + r.cells[1].textContent.trim())`)
	var mode, size string
	for _, r := range rows {
		note, text, _ := strings.Cut(r, "|")
		switch text {
		case "mode: slow":
			mode = note
		case `size: "5"`:
			size = note
		}
	}
	if !strings.Contains(mode, "test") || !strings.Contains(size, "tuner") {
		t.Fatalf("gutter: mode by %q, size by %q; want test and tuner (rows %q)", mode, size, rows)
	}
}
