package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The browser tests drive Debian's headless Chromium through the DevTools
// protocol over a pipe (--remote-debugging-pipe: commands go in on the
// browser's file descriptor 3, answers and events come out on 4, each a JSON
// object ended by a NUL byte), which needs no WebSocket client and no
// dependency.

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// screenshotsEnv names the directory the browser tests save their
// screenshots in; each test's temporary directory when unset.
const screenshotsEnv = "RELAY_TEST_SCREENSHOTS"

// requireChromium skips the test when Chromium is missing on a developer's
// machine, and fails it in CI (CI=true), where .ci/run installs it: the
// browser tests must never be skipped silently there.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: CI runs the browser tests (.ci/run installs Debian's chromium package)", chromiumPath)
		}
		t.Skipf("skipped: %s is missing (install Debian's chromium package; .ci/run does)", chromiumPath)
	}
}

// cdpMessage is a DevTools protocol message in either direction.
type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// browser is a headless Chromium driven over its DevTools pipe.
type browser struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     *os.File // the browser reads commands from it
	stderr bytes.Buffer

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpMessage
	console []string // what pages logged, and their uncaught errors
	gone    chan struct{}

	shots    string // the screenshot directory
	shotSeen bool
}

// startBrowser starts Chromium; it is stopped when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	requireChromium(t)
	dir := t.TempDir()
	cmdIn, toBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromBrowser, cmdOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: toBrowser, pending: map[int64]chan cdpMessage{}, gone: make(chan struct{})}
	b.cmd = exec.Command(chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--force-color-profile=srgb",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,900", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdIn, cmdOut}
	b.cmd.Stderr = &lockedWriter{w: &b.stderr, mu: &b.mu}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	cmdIn.Close()
	cmdOut.Close()
	go b.read(fromBrowser)
	t.Cleanup(b.stop)
	return b
}

// lockedWriter serialises writes to a buffer shared with the test.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// read delivers the browser's answers to their callers and keeps what the
// pages log.
func (b *browser) read(r io.Reader) {
	defer close(b.gone)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.pending[m.ID]; ch != nil {
				delete(b.pending, m.ID)
				ch <- m
			}
		} else if line := consoleLine(m); line != "" {
			b.console = append(b.console, line)
		}
		b.mu.Unlock()
	}
}

// consoleLine renders a page's console message or uncaught error.
func consoleLine(m cdpMessage) string {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		var parts []string
		for _, a := range p.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		return "console." + p.Type + ": " + strings.Join(parts, " ")
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return "uncaught: " + p.Details.Text + " " + p.Details.Exception.Description
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level string `json:"level"`
				Text  string `json:"text"`
				URL   string `json:"url"`
			} `json:"entry"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return "log." + p.Entry.Level + ": " + p.Entry.Text + " " + p.Entry.URL
	}
	return ""
}

// call sends a command (to a page when session is set) and decodes its
// result into out (when not nil).
func (b *browser) call(session, method string, params any, out any) error {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	if params == nil {
		params = struct{}{}
	}
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-b.gone:
		return fmt.Errorf("%s: the browser is gone:\n%s", method, b.stderrText())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer in 30 s", method)
	}
}

func (b *browser) stderrText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

// logs returns what the pages logged so far.
func (b *browser) logs() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.console, "\n")
}

// stop closes the browser, killing it when it does not go.
func (b *browser) stop() {
	_ = b.call("", "Browser.close", nil, nil)
	b.in.Close()
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

// page is one browser tab.
type page struct {
	b       *browser
	session string
}

// newPage opens a tab of 1280×900 pixels.
func (b *browser) newPage() *page {
	b.t.Helper()
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		b.t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		b.t.Fatal(err)
	}
	p := &page{b: b, session: attached.SessionID}
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.call(p.session, m, nil, nil); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := b.call(p.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// navigate loads a URL and waits for the document to be complete.
func (p *page) navigate(url string) {
	p.b.t.Helper()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.call(p.session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil || nav.ErrorText != "" {
		p.b.t.Fatalf("navigate to %s: %v %s", url, err, nav.ErrorText)
	}
	p.waitFor("the page to load", `document.readyState === "complete"`)
}

// eval runs a JavaScript expression in the page (awaiting a promise) and
// decodes its value into out (when not nil).
func (p *page) eval(expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.b.call(p.session, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r)
	if err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("%s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// must is eval that fails the test on an error.
func (p *page) must(expr string, out any) {
	p.b.t.Helper()
	if err := p.eval(expr, out); err != nil {
		p.fail("%v", err)
	}
}

// text returns an element's text, "" when there is none.
func (p *page) text(selector string) string {
	p.b.t.Helper()
	var s string
	p.must(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, selector), &s)
	return s
}

// click clicks an element, as a person would, at its centre.
func (p *page) click(selector string) {
	p.b.t.Helper()
	var box struct{ X, Y float64 }
	p.waitFor(selector+" to be visible", fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.offsetParent !== null && !e.disabled; })()`, selector))
	p.must(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect(); return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()`, selector), &box)
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		if err := p.b.call(p.session, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": box.X, "y": box.Y, "button": "left", "clickCount": 1}, nil); err != nil {
			p.fail("click %s: %v", selector, err)
		}
	}
}

// typeInto focuses an input, clears it and types text into it.
func (p *page) typeInto(selector, text string) {
	p.b.t.Helper()
	p.must(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.focus(); e.select && e.select(); })()`, selector), nil)
	if err := p.b.call(p.session, "Input.insertText", map[string]any{"text": text}, nil); err != nil {
		p.fail("type into %s: %v", selector, err)
	}
}

// waitFor waits until a JavaScript expression is true, for at most 20 s.
func (p *page) waitFor(what, expr string) {
	p.b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		err := p.eval("!!("+expr+")", &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.fail("waited 20 s for %s (%s): %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fail saves a screenshot of the page and fails the test with what the
// page logged.
func (p *page) fail(format string, args ...any) {
	p.b.t.Helper()
	p.screenshot("failure")
	var body string
	_ = p.eval(`document.body ? document.body.innerText : ""`, &body)
	p.b.t.Fatalf(format+"\n--- page text:\n%s\n--- page log:\n%s", append(args, body, p.b.logs())...)
}

// screenshot saves a PNG of the page as name.png in the screenshot
// directory, and says where.
func (p *page) screenshot(name string) string {
	p.b.t.Helper()
	b := p.b
	if b.shots == "" {
		b.shots = b.t.TempDir()
		if dir := os.Getenv(screenshotsEnv); dir != "" {
			b.shots = filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(b.t.Name(), "_"))
		}
		if err := os.MkdirAll(b.shots, 0o755); err != nil {
			b.t.Fatal(err)
		}
	}
	if !b.shotSeen {
		b.shotSeen = true
		b.t.Logf("screenshots in %s (set %s to keep them)", b.shots, screenshotsEnv)
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := b.call(p.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	file := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
	}
	return file
}

// cutProxy forwards TCP connections to a target and can drop them all at
// once, or refuse new ones for a while: a network drop, as a browser sees
// it.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	held  bool
}

// startCutProxy listens on a loopback port; it stops when the test ends.
func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if held {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// cut closes every open connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// hold refuses new connections (closing them at once) until released.
func (p *cutProxy) hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = on
}
