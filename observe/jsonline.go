package observe

import (
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/internal/jsonscan"
)

// JSONLineWriter is a log handler that can take a record already encoded
// as slog.JSONHandler would encode it: the relay's own logger, when it
// writes JSON. The access log writes a line for every request, and slog's
// generic encoding (attribute by attribute, a float through
// encoding/json) was a measurable share of a busy relay's CPU; lines it
// builds by hand go straight to the handler's output instead.
type JSONLineWriter interface {
	// WritesJSONLines reports whether the handler writes records as
	// slog.JSONHandler does with default options, with no attributes or
	// groups of its own, so that a line built by AppendJSONRecord is
	// exactly what it would have written.
	WritesJSONLines() bool
	// WriteJSONLine writes one whole line (ending in a newline) of a
	// record at level, which the caller has checked the handler enables.
	// The line is not kept past the call.
	WriteJSONLine(level slog.Level, line []byte) error
}

// jsonLineWriter returns the logger's handler as a JSONLineWriter when it
// takes hand-built lines.
func jsonLineWriter(log *slog.Logger) JSONLineWriter {
	if w, ok := log.Handler().(JSONLineWriter); ok && w.WritesJSONLines() {
		return w
	}
	return nil
}

// lineBuffers recycles the buffers access lines are built in.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledLine is the largest line buffer kept for reuse: a line with a
// long error message should not pin its memory.
const maxPooledLine = 16 << 10

// AppendJSONRecord appends a record as slog.JSONHandler with default
// options writes it: time (RFC 3339 with nanoseconds), level, msg, then
// the attributes in order, and a newline. It handles string, integer and
// float attributes, all an access line has, and reports false for any
// other kind (or a float that JSON cannot hold), for which the caller
// goes through slog instead.
func AppendJSONRecord(buf []byte, t time.Time, level slog.Level, msg string, attrs []slog.Attr) ([]byte, bool) {
	buf = append(buf, `{"time":"`...)
	buf = appendRFC3339Nano(buf, t)
	buf = append(buf, `","level":`...)
	buf = appendJSONString(buf, level.String())
	buf = append(buf, `,"msg":`...)
	buf = appendJSONString(buf, msg)
	for _, a := range attrs {
		buf = append(buf, ',')
		buf = appendJSONString(buf, a.Key)
		buf = append(buf, ':')
		switch a.Value.Kind() {
		case slog.KindString:
			buf = appendJSONString(buf, a.Value.String())
		case slog.KindInt64:
			buf = strconv.AppendInt(buf, a.Value.Int64(), 10)
		case slog.KindFloat64:
			f := a.Value.Float64()
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return buf, false
			}
			buf = appendJSONFloat(buf, f)
		default:
			return buf, false
		}
	}
	return append(buf, "}\n"...), true
}

// appendJSONFloat writes a float64 as encoding/json does (which is what
// slog's JSON handler calls): plain decimals, or an exponent of as few
// digits as needed outside [1e-6, 1e21).
func appendJSONFloat(buf []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	buf = strconv.AppendFloat(buf, f, format, -1, 64)
	if format == 'e' {
		// strconv writes e-07; JSON encoders write e-7.
		if n := len(buf); n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	return buf
}

// appendJSONString writes s quoted and escaped as slog's JSON handler
// escapes it: control characters, quote and backslash escaped, invalid
// UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped, HTML characters
// left as they are.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				if len(s)-i >= jsonscan.MinRun {
					i += jsonscan.PlainASCII(s[i:])
				} else {
					i++
				}
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '\\', '"':
				buf = append(buf, '\\', b)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// secondStamp is the RFC 3339 form of one second in one location: the
// date and time of day, and the zone's offset.
type secondStamp struct {
	unix int64
	loc  *time.Location
	head string // 2006-01-02T15:04:05
	zone string // Z or -07:00
}

// lastStamp is the second the latest access line was written in: lines
// come many to a second, and formatting the date anew for each was most
// of the time field's cost.
var lastStamp atomic.Pointer[secondStamp]

// appendRFC3339Nano appends t.Format(time.RFC3339Nano), with the date,
// time of day and offset taken from lastStamp when t falls in its second
// and location. A location's offset changes only on a whole second, so
// one second of one location has one offset.
func appendRFC3339Nano(buf []byte, t time.Time) []byte {
	unix, loc := t.Unix(), t.Location()
	st := lastStamp.Load()
	if st == nil || st.unix != unix || st.loc != loc {
		s := t.Truncate(time.Second).Format(time.RFC3339Nano)
		if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[19] == '.' {
			// A year before 0 or after 9999, which RFC 3339 cannot
			// hold either: written as time formats it.
			return t.AppendFormat(buf, time.RFC3339Nano)
		}
		st = &secondStamp{unix: unix, loc: loc, head: s[:19], zone: s[19:]}
		lastStamp.Store(st)
	}
	buf = append(buf, st.head...)
	if ns := t.Nanosecond(); ns != 0 {
		// A fraction of nine digits, without its trailing zeros.
		var f [10]byte
		f[0] = '.'
		for i := 9; i >= 1; i-- {
			f[i] = byte('0' + ns%10)
			ns /= 10
		}
		end := len(f)
		for f[end-1] == '0' {
			end--
		}
		buf = append(buf, f[:end]...)
	}
	return append(buf, st.zone...)
}
