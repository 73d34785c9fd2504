package ui_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// contrastJS lists the visible text elements whose WCAG 2.1 contrast
// ratio, text color against the first non-transparent background up
// the tree (the page's white when none), is under 4.5:1, or 3:1 for
// large text (24px, or 18.66px bold). SVG text counts its fill. Its
// answer is [the number of elements checked, the failures...].
const contrastJS = `(() => {
  const parse = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const over = (fg, bg) => [0, 1, 2].map((i) => fg[i] * fg[3] + bg[i] * (1 - fg[3])).concat(1);
  const background = (e) => {
    const stack = [];
    for (let n = e; n && n.nodeType === 1; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) { stack.push(c); if (c[3] === 1) break; }
    }
    let bg = [255, 255, 255, 1];
    for (let i = stack.length - 1; i >= 0; i--) bg = over(stack[i], bg);
    return bg;
  };
  const out = []; let checked = 0;
  for (const e of document.querySelectorAll("body *")) {
    if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    if (e.closest("title, script, style, option, datalist")) continue;
    const r = e.getBoundingClientRect();
    const s = getComputedStyle(e);
    if (r.width === 0 || r.height === 0 || r.right <= 0 || r.bottom <= 0 || s.visibility === "hidden" || e.closest("[hidden]")) continue;
    const isSVG = e instanceof SVGElement;
    let fg = parse(isSVG ? s.fill : s.color);
    if (!fg) continue;
    const bg = background(isSVG ? e.ownerSVGElement || e : e);
    fg = over(fg, bg);
    const [a, b] = [lum(fg), lum(bg)];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const px = parseFloat(s.fontSize), bold = Number(s.fontWeight) >= 700;
    const large = px >= 24 || (px >= 18.66 && bold);
    checked++;
    if (ratio < (large ? 3 : 4.5)) out.push(ratio.toFixed(2) + ":1 " + e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + "." + (e.getAttribute("class") || "") +
      " " + JSON.stringify(e.textContent.trim().slice(0, 40)) + " " + (isSVG ? s.fill : s.color) + " on rgb(" + bg.slice(0, 3).map(Math.round) + ")");
  }
  return [String(checked)].concat(out);
})()`

// checkContrast fails the test for each text element of the page below
// WCAG AA contrast; it needs at least min elements checked.
func checkContrast(t *testing.T, ctx context.Context, page string, min int) {
	t.Helper()
	res := eval[[]string](t, ctx, contrastJS)
	var n int
	fmt.Sscan(res[0], &n)
	if n < min {
		t.Errorf("%s page: only %d text elements checked, want at least %d", page, n, min)
	}
	if len(res) > 1 {
		t.Errorf("%s page: %d of %d text elements under WCAG AA contrast:\n%s", page, len(res)-1, n, strings.Join(res[1:], "\n"))
	}
}

// TestBrowserContrast: every visible text of the live page (with an
// added, a modified and a deleted object), the object page, the
// timeline and the audit page has WCAG 2.1 AA contrast against its
// background, and so does the focused skip link.
func TestBrowserContrast(t *testing.T) {
	ctx := browser(t)
	e := startUI(t)
	e.createCM(t, "default", "app", map[string]any{"mode": "slow"})
	e.login(t, ctx, "/live?resource=configmaps&namespace=default")
	poll(t, ctx, "the stream ready", `document.getElementById("status").textContent.startsWith("watching")`, 10*time.Second)
	e.createCM(t, "default", "gone", map[string]any{"k": "v"})
	e.patchCM(t, "default", "app", `{"data":{"mode":"fast","size":"1"}}`)
	e.patchCM(t, "default", "app", `{"data":{"size":null}}`)
	if err := e.cms.Delete(context.Background(), "default", "gone", deleteOptions); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the changes", `document.querySelectorAll("#events li").length === 4`, 5*time.Second)
	checkContrast(t, ctx, "live", 20)
	eval[bool](t, ctx, `document.querySelector(".skip").focus(), true`)
	checkContrast(t, ctx, "live (skip link focused)", 20)

	e.login(t, ctx, "/object?resource=configmaps&namespace=default&name=app")
	poll(t, ctx, "the history", `document.querySelectorAll("#history ol.revs li").length === 3`, 10*time.Second)
	eval[bool](t, ctx, `document.getElementById("diff-button").click(), true`)
	poll(t, ctx, "the diff", `document.querySelector("#diff h2")`, 5*time.Second)
	checkContrast(t, ctx, "object", 20)

	e.login(t, ctx, "/timeline?namespace=default&since=15m")
	poll(t, ctx, "the timeline", `document.getElementById("totals")`, 10*time.Second)
	checkContrast(t, ctx, "timeline", 20)

	e.login(t, ctx, "/audit")
	poll(t, ctx, "the audit page", `document.getElementById("audit") && document.getElementById("audit").textContent !== "loading…"`, 10*time.Second)
	checkContrast(t, ctx, "audit", 5)
}
