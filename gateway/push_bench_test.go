package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/tabletop-relay/relay/wire"
)

// BenchmarkPushEvents measures what the hub's writers spend per event on
// an SSE stream over HTTP/1.1 (ns/op is per event): framing a batch of 20
// events of about 300 bytes and writing it to a loopback TCP connection
// without blocking, which another goroutine drains. The system call is
// most of it, as it is of the fan-out floor's.
//
//	go test -run '^$' -bench PushEvents ./gateway/
func BenchmarkPushEvents(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	sw := newSSEWriter(connResponse{c})
	sw.raw = newRawWriter(rc)
	sink := pushSink{&directSink{sw: sw}}
	data := []byte(`{"actorUuid":"Actor.ariaVale00000001","uuid":"Actor.ariaVale00000001","changes":{"system":{"attributes":{"hp":{"value":12}}},"flags":{"bench":{"t":"` + strings.Repeat("1", 160) + `"}}}}`)
	const batch = 20
	evs := make([]wire.Event, batch)
	for i := range evs {
		evs[i] = wire.Event{Seq: uint64(1000 + i), Name: "actor-update", Data: data}
	}
	resumed := make(chan struct{}, 1)
	resume := func() { resumed <- struct{}{} }
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if !sink.WriteEvents(evs, resume) {
			// The socket was full: the rest goes out from a goroutine of
			// its own, which says when it is done.
			<-resumed
		}
	}
}

// connResponse is the least http.ResponseWriter that writes to a
// connection, for the writes that may block.
type connResponse struct{ net.Conn }

func (connResponse) Header() http.Header { return http.Header{} }
func (connResponse) WriteHeader(int)     {}
func (connResponse) Flush()              {}
