package observe

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// AccessOptions configure the access middleware.
type AccessOptions struct {
	// Log receives the access lines; none are written when nil.
	Log *slog.Logger
	// Metrics counts the requests; nothing is counted when nil.
	Metrics *Metrics
	// Routes labels requests the gateway does not label (no RPC route):
	// the first entry whose path equals the request's path, or is a prefix
	// of it followed by "/", gives its label. Others are labelled "other",
	// so that no request's own path ever becomes a label.
	Routes []string
	// Label, when set, labels what Routes does not (the tabletop module's
	// endpoints, whose paths carry a client id): it returns "" for
	// neither.
	Label func(path string) string
	// Hidden, when set, reports paths that carry a secret (a key request's
	// code, which fetches its key once approved): their access line shows
	// the route label in place of the path.
	Hidden func(path string) bool
}

// Access wraps next with the access log and the request metrics: each HTTP
// request that reaches it, answered or refused, gets one line ("http",
// level Info; Error for 5xx but 503 and 504, which are the relay's
// overload and time-out answers, Warn) with its method, path (without the
// query, which may carry a stream ticket), status, bytes written, duration in
// milliseconds (durationMs),
// request id, and once known the API key's id, the world, the RPC and its
// gRPC code. gRPC-native requests (HTTP/2 with an application/grpc
// content type) pass untouched: the interceptor chain logs and counts
// them.
func Access(next http.Handler, opts AccessOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		// One allocation holds both the writer and the record.
		aw := &accessWriter{ResponseWriter: w}
		next.ServeHTTP(aw, r.WithContext(WithRecord(r.Context(), &aw.rec)))
		st := aw.status
		if st == 0 {
			st = http.StatusOK // the handler wrote nothing
		}
		line := accessLine{method: r.Method, path: r.URL.Path, remote: r.RemoteAddr, status: st, bytes: aw.bytes, start: start, rec: aw.rec.Fields()}
		if line.rec.RequestID == "" {
			// A refusal before the chain (401 at admission, 404, 413,
			// 414) has the id the gateway issued in its header.
			line.requestIDHeader = aw.Header().Get("X-Request-Id")
		}
		if answer := aw.rec.detachedAnswer(); answer != nil {
			// The answer goes on (an event stream that took its
			// connection over): its line waits for the end, holding only
			// what it needs, not the request.
			detached := new(accessLine)
			*detached = line
			answer.whenEnded(func(end DetachedEnd) {
				detached.finish(context.Background(), opts, end)
			})
			return
		}
		line.finish(r.Context(), opts, DetachedEnd{})
	})
}

// accessLine is what a request's access line needs.
type accessLine struct {
	method, path, remote string
	status               int
	bytes                int64
	start                time.Time
	rec                  RecordFields
	requestIDHeader      string
}

// finish counts the request and writes its line, with the outcome of a
// detached answer's end.
func (l *accessLine) finish(ctx context.Context, opts AccessOptions, end DetachedEnd) {
	d := time.Since(l.start)
	rec := l.rec
	rec.Bytes += end.Bytes
	if end.Code != "" {
		rec.Code, rec.Error = end.Code, end.Error
	}
	if rec.Route == "" {
		rec.Route = opts.label(l.path)
	}
	opts.Metrics.ObserveHTTP(rec.Route, l.method, l.status, d)
	if opts.Log != nil {
		path := l.path
		if opts.Hidden != nil && opts.Hidden(path) {
			path = rec.Route
		}
		writeAccessLine(ctx, opts.Log, l, path, &rec, d)
	}
}

// label is the route label of a request the gateway did not label.
func (o AccessOptions) label(path string) string {
	for _, p := range o.Routes {
		if path == p || strings.HasPrefix(path, p) && strings.HasPrefix(path[len(p):], "/") {
			return p
		}
	}
	if o.Label != nil {
		if l := o.Label(path); l != "" {
			return l
		}
	}
	return "other"
}

// maxAccessAttrs is the most attributes an access line has.
const maxAccessAttrs = 14

// writeAccessLine writes one request's line.
func writeAccessLine(ctx context.Context, log *slog.Logger, l *accessLine, path string, rec *RecordFields, d time.Duration) {
	status := l.status
	level := slog.LevelInfo
	switch {
	case status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		level = slog.LevelWarn
	case status >= 500:
		level = slog.LevelError
	}
	if !log.Enabled(ctx, level) {
		return
	}
	requestID := rec.RequestID
	if requestID == "" {
		requestID = l.requestIDHeader
	}
	// The record is built by hand, as the chain's rpc line is: it is
	// written for every request. The attributes are gathered first and
	// added at once, so that the record grows its storage once rather
	// than at each optional one.
	var attrs [maxAccessAttrs]slog.Attr
	a := append(attrs[:0],
		slog.String("method", l.method),
		slog.String("path", path),
		slog.String("route", rec.Route),
		slog.Int("status", status),
		slog.Int64("bytes", l.bytes+rec.Bytes),
		slog.Float64("durationMs", Milliseconds(d)),
	)
	if requestID != "" {
		a = append(a, slog.String("requestId", requestID))
	}
	if rec.KeyID != "" {
		a = append(a, slog.String("keyId", rec.KeyID))
	}
	if rec.World != "" {
		a = append(a, slog.String("clientId", rec.World))
	}
	if rec.User != "" {
		a = append(a, slog.String("user", rec.User))
	}
	if rec.RPC != "" {
		a = append(a, slog.String("rpc", rec.RPC), slog.String("code", rec.Code))
	}
	if rec.Error != "" {
		a = append(a, slog.String("error", rec.Error))
	}
	a = append(a, slog.String("remote", l.remote))
	now := time.Now()
	if w := jsonLineWriter(log); w != nil {
		// The relay's own JSON logger: the line is encoded here, in a
		// recycled buffer, exactly as slog would encode it.
		bp := lineBuffers.Get().(*[]byte)
		buf, ok := AppendJSONRecord((*bp)[:0], now, level, "http", a)
		if ok {
			_ = w.WriteJSONLine(level, buf)
		}
		if cap(buf) <= maxPooledLine {
			*bp = buf[:0]
			lineBuffers.Put(bp)
		}
		if ok {
			return
		}
	}
	line := slog.NewRecord(now, level, "http", 0)
	line.AddAttrs(a...)
	_ = log.Handler().Handle(ctx, line)
}

// accessWriter records the status and the bytes of an answer. It passes
// Flush (event streams) and Hijack (the tabletop module's socket) through,
// and Unwrap for http.ResponseController.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	rec    Record
}

func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		stampDate(w.Header())
	}
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	if code == http.StatusSwitchingProtocols {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		stampDate(w.Header())
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush sends what is buffered, for event streams.
func (w *accessWriter) Flush() {
	if w.status == 0 {
		stampDate(w.Header())
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over (a tabletop's WebSocket), which then
// counts as switching protocols.
func (w *accessWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Milliseconds is a duration as the logs give it (durationMs): a number of
// milliseconds with microseconds as its fraction, the same in text and
// JSON lines.
func Milliseconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// stampDate gives an answer the Date header net/http would give it, from
// a value made once a second: net/http formats the time anew for every
// answer, which was a visible share of a small read's instructions. As
// net/http does, it leaves a Date the handler set, or removed by setting
// it to nil, alone. The header is stamped when the answer's header is
// written, as net/http stamps it.
func stampDate(h http.Header) {
	if _, ok := h["Date"]; ok {
		return
	}
	h["Date"] = httpDate(time.Now())
}

// dateValue is the Date header's value for one second.
type dateValue struct {
	unix  int64
	value []string
}

// lastDate is the Date value of the latest second one was made for.
var lastDate atomic.Pointer[dateValue]

// httpDate returns the Date header's value for now, in the form net/http
// writes (http.TimeFormat, in UTC). The slice returned is shared by every
// answer of that second: headers only read it, and Set or Add on a
// header replace or grow it rather than write into it.
func httpDate(now time.Time) []string {
	unix := now.Unix()
	if d := lastDate.Load(); d != nil && d.unix == unix {
		return d.value
	}
	d := &dateValue{unix: unix, value: []string{now.UTC().Format(http.TimeFormat)}}
	lastDate.Store(d)
	return d.value
}
