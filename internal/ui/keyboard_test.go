package ui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// focusJS describes the focused element: its id, or an input's
// name=value, or its tag and text; and "NO-OUTLINE " before it when
// it shows no focus outline of at least 2px.
const focusJS = `(() => {
  const e = document.activeElement;
  if (!e || e === document.body) return "body";
  const s = getComputedStyle(e);
  const ring = s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2 ? "" : "NO-OUTLINE ";
  if (e.id) return ring + e.id;
  if (e.tagName === "INPUT") return ring + e.name + "=" + e.value;
  return ring + e.tagName.toLowerCase() + ":" + e.textContent.trim();
})()`

// tabThrough presses Tab n times from the top of the page and returns
// what had the focus after each.
func tabThrough(t *testing.T, ctx context.Context, n int) []string {
	t.Helper()
	// Start before the page's first element: a focusable mark there,
	// removed once Tab has left it.
	eval[bool](t, ctx, `(() => { const m = document.createElement("span"); m.id = "tab-start"; m.tabIndex = -1;
	  document.body.prepend(m); m.focus(); return true })()`)
	var seq []string
	for i := range n {
		do(t, ctx, chromedp.KeyEvent(kb.Tab))
		if i == 0 {
			eval[bool](t, ctx, `document.getElementById("tab-start").remove(), true`)
		}
		seq = append(seq, eval[string](t, ctx, focusJS))
	}
	return seq
}

func wantSeq(t *testing.T, page string, got, want []string) {
	t.Helper()
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("Tab order on the %s page:\n got %q\nwant %q", page, got, want)
	}
}

var navFocus = []string{"a:Skip to content", "nav-live", "nav-object", "nav-timeline", "nav-audit"}

// TestBrowserKeyboard: every control of the live page and the object
// page is reached with Tab in reading order, each with a visible focus
// outline; Space pauses and resumes; Enter on a change's link opens the
// object page; the revision pickers move with the arrow keys and Enter
// on the diff button shows the diff.
func TestBrowserKeyboard(t *testing.T) {
	ctx, e := liveOnApp(t)
	e.patchCM(t, "default", "app", `{"data":{"mode":"fast"}}`)
	poll(t, ctx, "the change", `document.querySelector("#events li.MODIFIED a")`, 5*time.Second)

	live := append(append([]string{}, navFocus...), "f-resource", "f-namespace", "f-selector", "f-fields", "button:Watch", "pause", "clear", "grep", "a:default/app")
	wantSeq(t, "live", tabThrough(t, ctx, len(live)), live)

	// Space on the pause button pauses, and again resumes.
	do(t, ctx, chromedp.Focus("#pause"), chromedp.KeyEvent(" "))
	poll(t, ctx, "paused", `document.getElementById("status").textContent.startsWith("paused")`, 5*time.Second)
	do(t, ctx, chromedp.KeyEvent(" "))
	poll(t, ctx, "resumed", `document.getElementById("pause").textContent === "Pause" && document.getElementById("status").textContent.includes("watching")`, 5*time.Second)

	// Enter on the change's link opens the object page.
	if f := tabThrough(t, ctx, len(live)); f[len(f)-1] != "a:default/app" {
		t.Fatalf("Tab order after resume: %q", f)
	}
	do(t, ctx, chromedp.KeyEvent(kb.Enter))
	poll(t, ctx, "the object page", `location.hash.startsWith("#/object?") && document.querySelectorAll("#blame tr").length > 0`, 10*time.Second)
	if h := eval[string](t, ctx, `document.querySelector("#object h2").textContent`); h != "ConfigMap default/app" {
		t.Fatalf("Enter opened %q", h)
	}

	// The object page: the form, the dependents button, the two
	// revision pickers (one stop each), the diff button.
	e.patchCM(t, "default", "app", `{"data":{"size":"5"}}`)
	do(t, ctx, chromedp.Reload())
	poll(t, ctx, "three revisions", `document.querySelectorAll("#history ol.revs li").length === 3`, 10*time.Second)
	rvs := eval[[]string](t, ctx, `[...document.querySelectorAll("#history ol.revs li")].map(li => li.dataset.rv)`)
	object := append(append([]string{}, navFocus...), "f-resource", "f-namespace", "f-name", "button:Show", "button:Find dependents",
		"from="+rvs[1], "to="+rvs[2], "diff-button")
	wantSeq(t, "object", tabThrough(t, ctx, len(object)), object)

	// On the "from" picker ArrowUp picks the first revision; Tab to the
	// "to" picker (still the last) and the diff button; Enter diffs them.
	tabThrough(t, ctx, len(object)-2)
	do(t, ctx, chromedp.KeyEvent(kb.ArrowUp))
	if f := eval[string](t, ctx, focusJS); f != "from="+rvs[0] {
		t.Fatalf("ArrowUp on the from picker focused %q, want from=%s", f, rvs[0])
	}
	do(t, ctx, chromedp.KeyEvent(kb.Tab))
	if f := eval[string](t, ctx, focusJS); f != "to="+rvs[2] {
		t.Fatalf("Tab from the from picker focused %q, want to=%s", f, rvs[2])
	}
	do(t, ctx, chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter))
	poll(t, ctx, "the diff of the first and the last revision", `document.getElementById("diff").textContent.includes("rv=`+rvs[0]+` → rv=`+rvs[2]+`") && document.getElementById("diff").textContent.includes("~ data.size: 3 → 5")`, 5*time.Second)
}
