package ui_test

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// bidi is a minimal WebDriver BiDi client of a headless Firefox
// (firefox-esr --remote-debugging-port): commands one at a time, events
// ignored. It is used by one goroutine, the test's.
type bidi struct {
	t    *testing.T
	conn *websocket.Conn
	id   int
	ctx  string // the browsing context (tab)
}

// firefox starts headless Firefox with WebDriver BiDi and opens a
// session, or skips the test when there is no firefox-esr or firefox.
func firefox(t *testing.T) *bidi {
	t.Helper()
	var path string
	for _, name := range []string{"firefox-esr", "firefox"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("no firefox found (apt-get install firefox-esr): skipping the Firefox test")
	}
	cmd := exec.Command(path, "--headless", "--no-remote", "--profile", t.TempDir(), "--remote-debugging-port", "0", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		wg.Wait()
	})
	addr := make(chan string, 1)
	wg.Add(1)
	go func() { // reads Firefox's stderr until it exits
		defer wg.Done()
		re := regexp.MustCompile(`WebDriver BiDi listening on (ws://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var ws string
	select {
	case ws = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("Firefox did not say where WebDriver BiDi listens within 30s")
	}
	conn, _, err := websocket.DefaultDialer.Dial(ws+"/session", nil)
	if err != nil {
		t.Fatalf("WebDriver BiDi at %s: %v", ws, err)
	}
	t.Cleanup(func() { conn.Close() })
	b := &bidi{t: t, conn: conn}
	b.call("session.new", map[string]any{"capabilities": map[string]any{}})
	var tree struct {
		Contexts []struct {
			Context string `json:"context"`
		} `json:"contexts"`
	}
	b.decode(b.call("browsingContext.getTree", map[string]any{}), &tree)
	if len(tree.Contexts) == 0 {
		t.Fatal("Firefox has no browsing context")
	}
	b.ctx = tree.Contexts[0].Context
	return b
}

// call sends a command and returns its result, failing the test on an
// error answer.
func (b *bidi) call(method string, params any) json.RawMessage {
	b.t.Helper()
	b.id++
	if err := b.conn.WriteJSON(map[string]any{"id": b.id, "method": method, "params": params}); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	b.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var m struct {
			ID      int             `json:"id"`
			Type    string          `json:"type"`
			Result  json.RawMessage `json:"result"`
			Error   string          `json:"error"`
			Message string          `json:"message"`
		}
		if err := b.conn.ReadJSON(&m); err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		if m.ID != b.id {
			continue // an event
		}
		if m.Type == "error" {
			b.t.Fatalf("%s: %s: %s", method, m.Error, m.Message)
		}
		return m.Result
	}
}

func (b *bidi) decode(raw json.RawMessage, v any) {
	b.t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("decoding %s: %v", raw, err)
	}
}

func (b *bidi) navigate(url string) {
	b.t.Helper()
	b.call("browsingContext.navigate", map[string]any{"context": b.ctx, "url": url, "wait": "complete"})
}

// eval evaluates a JavaScript expression to a string.
func (b *bidi) eval(js string) string {
	b.t.Helper()
	var r struct {
		Type   string `json:"type"`
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.decode(b.call("script.evaluate", map[string]any{"expression": "String(" + js + ")", "target": map[string]any{"context": b.ctx}, "awaitPromise": false}), &r)
	if r.Type != "success" {
		b.t.Fatalf("evaluate %s: %s", js, r.ExceptionDetails.Text)
	}
	s, _ := r.Result.Value.(string)
	return s
}

// poll waits until the expression is true, failing after d.
func (b *bidi) poll(what, js string, d time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	for b.eval("!!("+js+")") != "true" {
		if time.Since(start) > d {
			b.t.Fatalf("Firefox did not show %s within %s; it shows:\n%s", what, d, b.eval(`document.body.innerText.slice(0, 2000)`))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestFirefoxLive: in headless Firefox (driven over WebDriver BiDi) the
// live page shows a patch's diff within a second, as in Chromium
// (TestBrowserLive).
func TestFirefoxLive(t *testing.T) {
	ff := firefox(t)
	e := startUI(t)
	e.createCM(t, "default", "app", map[string]any{"mode": "slow", "size": "3"})
	ff.navigate(e.s.URL())
	ff.navigate("http://" + e.addr + "/#/live?resource=configmaps&namespace=default")
	ff.poll("the stream ready", `document.getElementById("status").textContent.startsWith("watching")`, 10*time.Second)
	e.patchCM(t, "default", "app", `{"data":{"mode":"fast"}}`)
	took := ff.poll("the patch's diff", `[...document.querySelectorAll("#events li.MODIFIED .chg")].some(d => d.textContent === "~ data.mode: slow → fast")`, time.Second)
	t.Logf("Firefox %s: the diff was on the page %s after the patch returned", strings.TrimSpace(ff.eval(`navigator.userAgent`)), took)
	if ua := ff.eval(`navigator.userAgent`); !strings.Contains(ua, "Firefox/") {
		t.Fatalf("user agent %q is not Firefox", ua)
	}
}
