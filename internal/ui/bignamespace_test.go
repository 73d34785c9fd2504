package ui_test

import (
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var bigObjects = flag.Int("ui.objects", 2000, "how many ConfigMaps TestBrowserBigNamespace creates in its namespace (the full size: 10000)")

// longTasksJS starts recording the page's long tasks (over 50ms) in
// window.longTasks.
const longTasksJS = `(() => { window.longTasks = [];
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.longTasks.push(Math.round(e.duration)); }).observe({ type: "longtask" });
  return true; })()`

// TestBrowserBigNamespace: with -ui.objects ConfigMaps in one namespace
// (2,000 by default, 10,000 for the documented numbers) and 100
// changes/s made to them for -ui.soak, the live page receives every
// change, holds at most its rows bound (200 in a short run, 1,000), keeps
// its JavaScript heap under 64 MiB and runs no task over 200ms; the
// namespace's timeline, opened in a second tab halfway through the
// writes, lists the changes up to its bound (MaxTimeline, 5,000 rows)
// with no task over a second.
func TestBrowserBigNamespace(t *testing.T) {
	ctx := browser(t)
	e := startUI(t)
	n := *bigObjects
	e.createNamespace(t, "big")
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				e.createCM(t, "big", fmt.Sprintf("cm-%05d", i), map[string]any{"n": "0", "payload": "some configuration text of a typical length"})
			}
		}()
	}
	wg.Wait()
	t.Logf("created %d ConfigMaps in %s", n, time.Since(t0).Round(time.Millisecond))

	// The page's bound is 1000 rows; a short run lowers it to 200 to
	// reach it.
	bound := 1000
	if *soak < 20*time.Second {
		bound = 200
	}
	t0 = time.Now()
	e.login(t, ctx, fmt.Sprintf("/live?resource=configmaps&namespace=big&rows=%d", bound))
	poll(t, ctx, "the stream ready", fmt.Sprintf(`document.getElementById("status").textContent === "watching configmaps (%d objects)"`, n), 30*time.Second)
	t.Logf("the live page was watching %s after it was opened", time.Since(t0).Round(time.Millisecond))
	eval[bool](t, ctx, longTasksJS)
	t0 = time.Now()
	done := make(chan int, 1)
	go func() {
		done <- writeAtRate(t, e, "big", n, 16, *soak, func(i int) string { return fmt.Sprintf("cm-%05d", i) })
	}()
	sent := -1
	t.Cleanup(func() { // the writers end before the server, also when the test fails early
		if sent < 0 {
			<-done
		}
	})

	// Halfway, the namespace's timeline in a second tab, while the
	// writes go on: every creation and change so far, at most
	// MaxTimeline rows.
	time.Sleep(*soak / 2)
	tctx, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	do(t, tctx, chromedp.Navigate("http://"+e.addr+"/#/timeline?namespace=big&since=15m"))
	t1 := time.Now()
	eval[bool](t, tctx, longTasksJS)
	poll(t, tctx, "the timeline", `document.getElementById("totals")`, 60*time.Second)
	took := time.Since(t1)
	trows := eval[int](t, tctx, `document.querySelectorAll("#changes tr").length - 1`)
	totals := eval[string](t, tctx, `document.getElementById("totals").textContent`)
	theap := eval[float64](t, tctx, `performance.memory ? performance.memory.usedJSHeapSize : 0`)
	tlong := eval[[]int](t, tctx, `window.longTasks`)
	t.Logf("timeline: shown %s after it was opened, %d rows, %q, JS heap %.1f MiB, long tasks (ms) %v", took.Round(time.Millisecond), trows, totals, theap/(1<<20), tlong)
	if trows < min(n, 5000) || trows > 5000 {
		t.Errorf("the timeline lists %d changes, want from %d to its bound 5000", trows, min(n, 5000))
	}
	if theap > 128<<20 {
		t.Errorf("the timeline's JS heap is %.1f MiB, over 128 MiB", theap/(1<<20))
	}
	for _, d := range tlong {
		if d > 1000 {
			t.Errorf("a task of %dms on the timeline (over 1s)", d)
		}
	}

	sent = <-done
	elapsed := time.Since(t0)
	poll(t, ctx, "every change", fmt.Sprintf(`live.count >= %d`, sent), 30*time.Second)
	rows, count, heap := checkLive(t, ctx, sent, bound)
	long := eval[[]int](t, ctx, `window.longTasks`)
	t.Logf("live page: %d objects, %d changes in %s (%.0f/s); received %d, holds %d rows, JS heap %.1f MiB, long tasks (ms) %v",
		n, sent, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), count, rows, heap/(1<<20), long)
	for _, d := range long {
		if d > 200 {
			t.Errorf("a task of %dms on the live page (over 200ms)", d)
		}
	}
}
