package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAppendJSONRecordMatchesSlog: a record encoded by hand is byte for
// byte what slog's JSON handler writes, for the kinds an access line has,
// strings that need escaping, and floats of every magnitude.
func TestAppendJSONRecordMatchesSlog(t *testing.T) {
	strs := []string{"", "/get", `quote " and \ backslash`, "tab\tnew\nline\rret", "\x00\x01\x1f\x7f",
		"<html>&amp;</html>", "caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff utf-8 \xe2\x82", "ends in \xc3"}
	floats := []float64{0, 0.001, 1.5, 12.345, 1234567.891, 1e-7, 2.5e-9, 1e21, 3.4e25, -0.25, -1e-8}
	times := []time.Time{
		time.Date(2026, 11, 29, 8, 46, 51, 970036967, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.FixedZone("X", 3600)),
	}
	levels := []slog.Level{slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelDebug}
	for i, s := range strs {
		attrs := []slog.Attr{
			slog.String("method", "GET"),
			slog.String("path", s),
			slog.Int("status", 200+i),
			slog.Int64("bytes", int64(i)*-12345),
			slog.Float64("durationMs", floats[i%len(floats)]),
			slog.String(s, "key "+s),
		}
		for _, f := range floats {
			attrs = append(attrs, slog.Float64("f", f))
		}
		tm, level := times[i%len(times)], levels[i%len(levels)]
		var want bytes.Buffer
		rec := slog.NewRecord(tm, level, "http "+s, 0)
		rec.AddAttrs(attrs...)
		if err := slog.NewJSONHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug}).Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		got, ok := AppendJSONRecord(nil, tm, level, "http "+s, attrs)
		if !ok {
			t.Fatalf("%q: not encoded", s)
		}
		if string(got) != want.String() {
			t.Errorf("hand-encoded line differs from slog's:\n got %s\nwant %s", got, want.String())
		}
	}
	// What the hand encoder does not know goes to slog.
	for _, a := range []slog.Attr{slog.Bool("b", true), slog.Duration("d", time.Second), slog.Float64("nan", nanValue())} {
		if _, ok := AppendJSONRecord(nil, times[0], slog.LevelInfo, "http", []slog.Attr{a}); ok {
			t.Errorf("%s: encoded by hand, want left to slog", a.Key)
		}
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// lineCatcher is a JSONLineWriter over slog's JSON handler, as the relay's
// logger is, which counts the lines handed to it already encoded.
type lineCatcher struct {
	slog.Handler
	mu    sync.Mutex
	out   *bytes.Buffer
	lines int
}

func (c *lineCatcher) WritesJSONLines() bool { return true }

func (c *lineCatcher) WriteJSONLine(_ slog.Level, line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines++
	_, err := c.out.Write(line)
	return err
}

// TestAccessLineHandEncoded: with a logger that takes encoded lines, the
// access line is encoded by hand and carries the same fields, in the same
// order, with the same values as the one slog writes (but for the time
// and the duration, which differ between two requests).
func TestAccessLineHandEncoded(t *testing.T) {
	var viaSlog, viaLines bytes.Buffer
	catcher := &lineCatcher{Handler: slog.NewJSONHandler(&viaLines, nil), out: &viaLines}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := RecordFrom(r.Context())
		rec.SetRoute("/get")
		rec.SetCall("/relay.v1.DocumentService/GetDocument", "NotFound", "get_7", "0123456789abcdef", "demo", "Alice", "No \"actor\" named\n<Bob>")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"x"}`))
	})
	for _, log := range []*slog.Logger{slog.New(slog.NewJSONHandler(&viaSlog, nil)), slog.New(catcher)} {
		req := httptest.NewRequest(http.MethodGet, "/get?uuid=x", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		Access(next, AccessOptions{Log: log}).ServeHTTP(httptest.NewRecorder(), req)
	}
	if catcher.lines != 1 {
		t.Fatalf("%d lines handed over encoded, want 1", catcher.lines)
	}
	want, got := jsonFields(t, viaSlog.String()), jsonFields(t, viaLines.String())
	if len(got) != len(want) {
		t.Fatalf("fields differ:\n got %v\nwant %v", got, want)
	}
	for i := range want {
		if got[i][0] != want[i][0] || got[i][0] != "time" && got[i][0] != "durationMs" && got[i][1] != want[i][1] {
			t.Errorf("field %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if !strings.HasSuffix(viaLines.String(), "}\n") || strings.Count(viaLines.String(), "\n") != 1 {
		t.Errorf("not one line: %q", viaLines.String())
	}

	// A logger with attributes of its own goes through slog, which adds
	// them.
	viaLines.Reset()
	catcher.lines = 0
	withAttrs := slog.New(catcher).With("node", "a")
	Access(next, AccessOptions{Log: withAttrs}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/get", nil))
	if catcher.lines != 0 || !strings.Contains(viaLines.String(), `"node":"a"`) {
		t.Errorf("a logger with attributes: %d lines encoded by hand, wrote %q", catcher.lines, viaLines.String())
	}
}

// jsonFields lists a JSON object's members in order, each value as its
// JSON text.
func jsonFields(t *testing.T, line string) [][2]string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %q", line)
	}
	var fields [][2]string
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		fields = append(fields, [2]string{key.(string), string(v)})
	}
	return fields
}

// TestAppendRFC3339NanoMatchesTime: the access line's time, whose date
// is kept from one line to the next of the same second, is what
// time.Format writes, for fractions with and without trailing zeros, for
// locations taking turns (each turn changes the kept second), across a
// daylight-saving change, and for years RFC 3339 cannot hold.
func TestAppendRFC3339NanoMatchesTime(t *testing.T) {
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		newYork = time.FixedZone("EST", -5*3600)
	}
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("X", 3600), time.FixedZone("Y", -(9*3600 + 30*60)), newYork}
	fractions := []int{0, 1, 10, 100000000, 120000000, 123456789, 999999999, 500}
	bases := []time.Time{
		time.Date(2026, 11, 29, 8, 46, 51, 0, time.UTC),
		// One second before New York's clocks went back, and the
		// seconds that follow.
		time.Date(2026, 11, 1, 5, 59, 59, 0, time.UTC),
		time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, base := range bases {
		for s := range 3 {
			for _, f := range fractions {
				for _, loc := range locs {
					tm := base.Add(time.Duration(s)*time.Second + time.Duration(f)).In(loc)
					got := string(appendRFC3339Nano([]byte("x"), tm))
					if want := "x" + tm.Format(time.RFC3339Nano); got != want {
						t.Fatalf("%v: got %q, want %q", tm, got, want)
					}
				}
			}
		}
	}
	// The clock's own times, with their monotonic reading.
	for range 1000 {
		now := time.Now()
		if got, want := string(appendRFC3339Nano(nil, now)), now.Format(time.RFC3339Nano); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
