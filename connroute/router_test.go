package connroute

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frame encodes one HTTP/2 frame.
func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// headerBlock encodes request headers with HPACK, Huffman coding included.
func headerBlock(contentType string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/grpc.health.v1.Health/Check"}, {Name: ":authority", Value: "relay"},
	}
	if contentType != "" {
		fields = append(fields, hpack.HeaderField{Name: "content-type", Value: contentType})
	}
	fields = append(fields, hpack.HeaderField{Name: "te", Value: "trailers"})
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	return buf.Bytes()
}

var (
	clientSettings = frame(frameSettings, 0, 0, []byte{0, 4, 0, 0x10, 0, 0}) // INITIAL_WINDOW_SIZE
	settingsAck    = frame(frameSettings, flagAck, 0, nil)
	windowUpdate   = frame(frameWindowUpdate, 0, 0, []byte{0, 0x0f, 0, 1})
)

// routed runs the router over a pipe: the client side writes what it is
// given, and the test gets where the connection went and the bytes the
// server side reads until the client closes.
type routed struct {
	toGRPC bool
	bytes  []byte
	// fromRouter is what the router wrote to the client before handing
	// the connection over.
	fromRouter []byte
}

func route(t *testing.T, parts ...[]byte) routed {
	t.Helper()
	ln := newPipeListener()
	r := New(ln, Config{HeaderTimeout: 5 * time.Second})
	defer r.Close()
	client := ln.dial()
	fromRouter := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 64)
		_ = client.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := io.ReadAtLeast(client, buf, 1)
		fromRouter <- buf[:n]
	}()
	go func() {
		for _, p := range parts {
			if _, err := client.Write(p); err != nil {
				return
			}
			time.Sleep(time.Millisecond) // arrive in pieces
		}
		time.Sleep(20 * time.Millisecond)
		_ = client.Close()
	}()
	var out routed
	var c net.Conn
	accepted := make(chan net.Conn, 2)
	go func() {
		if c, err := r.GRPC().Accept(); err == nil {
			accepted <- &taggedConn{Conn: c, grpc: true}
		}
	}()
	go func() {
		if c, err := r.HTTP().Accept(); err == nil {
			accepted <- c
		}
	}()
	select {
	case c = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the router handed the connection to nobody")
	}
	if tc, ok := c.(*taggedConn); ok {
		out.toGRPC, c = true, tc.Conn
	}
	data, _ := io.ReadAll(c)
	out.bytes = data
	select {
	case out.fromRouter = <-fromRouter:
	case <-time.After(3 * time.Second):
	}
	return out
}

type taggedConn struct {
	net.Conn
	grpc bool
}

func TestRouteByFirstBytes(t *testing.T) {
	t.Parallel()
	preface := clientPreface
	grpcHeaders := frame(frameHeaders, flagEndHeaders, 1, headerBlock("application/grpc"))
	restHeaders := frame(frameHeaders, flagEndHeaders, 1, headerBlock("application/json"))
	data := frame(0x0, 0x1, 1, []byte("hello"))
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name   string
		parts  [][]byte
		toGRPC bool
		want   []byte // what the server reads; nil: everything sent
	}{
		{"HTTP/1.1", [][]byte{[]byte("GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")}, false, nil},
		{"HTTP/1.1 starting like the preface", [][]byte{[]byte("P"), []byte("OST /update HTTP/1.1\r\n\r\n")}, false, nil},
		{"garbage", [][]byte{[]byte("\x00\x01\x02")}, false, nil},
		{"gRPC, the acknowledgement after the request", [][]byte{preface, clientSettings, windowUpdate, grpcHeaders, settingsAck, data}, true,
			join(preface, clientSettings, windowUpdate, grpcHeaders, data)},
		{"gRPC, the acknowledgement before the request", [][]byte{preface[:5], preface[5:], clientSettings, settingsAck, grpcHeaders, data}, true,
			join(preface, clientSettings, grpcHeaders, data)},
		{"gRPC with a subtype", [][]byte{preface, clientSettings, frame(frameHeaders, flagEndHeaders, 1, headerBlock("application/grpc+proto")), settingsAck}, true,
			join(preface, clientSettings, frame(frameHeaders, flagEndHeaders, 1, headerBlock("application/grpc+proto")))},
		{"REST over h2c", [][]byte{preface, clientSettings, settingsAck, restHeaders}, false, join(preface, clientSettings, restHeaders)},
		{"gRPC-Web is not gRPC", [][]byte{preface, clientSettings, frame(frameHeaders, flagEndHeaders, 1, headerBlock("application/grpc-web"))}, false, nil},
		{"no content type", [][]byte{preface, clientSettings, frame(frameHeaders, flagEndHeaders, 1, headerBlock(""))}, false, nil},
		{"data before any request", [][]byte{preface, clientSettings, data}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := route(t, tc.parts...)
			if got.toGRPC != tc.toGRPC {
				t.Fatalf("routed to gRPC: %v, want %v", got.toGRPC, tc.toGRPC)
			}
			want := tc.want
			if want == nil {
				want = join(tc.parts...)
			}
			if !bytes.Equal(got.bytes, want) {
				t.Fatalf("the server read\n%q\nwant\n%q", got.bytes, want)
			}
			h2 := bytes.HasPrefix(want, clientPreface)
			if h2 != bytes.Equal(got.fromRouter, emptySettings) {
				t.Fatalf("the router wrote %q to an HTTP/2 connection: %v", got.fromRouter, h2)
			}
		})
	}
}

// TestHeaderBlockShapes: padding, priority and CONTINUATION frames.
func TestHeaderBlockShapes(t *testing.T) {
	t.Parallel()
	block := headerBlock("application/grpc")
	padded := append(append([]byte{3}, block...), 0, 0, 0)
	priority := append([]byte{0, 0, 0, 0, 16}, block...)
	split := len(block) / 2
	for name, parts := range map[string][][]byte{
		"padded":       {frame(frameHeaders, flagEndHeaders|flagPadded, 1, padded)},
		"priority":     {frame(frameHeaders, flagEndHeaders|flagPriority, 1, priority)},
		"continuation": {frame(frameHeaders, 0, 1, block[:split]), frame(frameContinuation, flagEndHeaders, 1, block[split:])},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := route(t, append([][]byte{clientPreface, clientSettings}, parts...)...)
			if !got.toGRPC {
				t.Fatal("not routed to gRPC")
			}
		})
	}
}

// TestSilentConnectionClosed: a connection that shows nothing within the
// header time-out is closed and handed to no server.
func TestSilentConnectionClosed(t *testing.T) {
	t.Parallel()
	ln := newPipeListener()
	r := New(ln, Config{HeaderTimeout: 200 * time.Millisecond})
	defer r.Close()
	for _, sent := range [][]byte{nil, clientPreface, append(append([]byte{}, clientPreface...), clientSettings...)} {
		client := ln.dial()
		if len(sent) > 0 {
			if _, err := client.Write(sent); err != nil {
				t.Fatal(err)
			}
		}
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err := io.ReadAll(client)
		if err != nil {
			t.Fatalf("after %q: %v, want the router to close the connection", sent, err)
		}
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Fatalf("after %q: closed after %v, before the time-out", sent, took)
		}
	}
}

// TestDirect: connections the Direct function picks go to gRPC unseen.
func TestDirect(t *testing.T) {
	t.Parallel()
	ln := newPipeListener()
	r := New(ln, Config{Direct: func(net.Conn) bool { return true }})
	defer r.Close()
	client := ln.dial()
	go func() { _, _ = client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); client.Close() }()
	c, err := r.GRPC().Accept()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(c); string(got) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q", got)
	}
}

// TestCloseEndsBothListeners: closing the router ends both servers'
// Accept with net.ErrClosed.
func TestCloseEndsBothListeners(t *testing.T) {
	t.Parallel()
	r := New(newPipeListener(), Config{})
	errs := make(chan error, 2)
	for _, l := range []net.Listener{r.GRPC(), r.HTTP()} {
		go func() { _, err := l.Accept(); errs <- err }()
	}
	_ = r.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	}
}

// TestRealServersShareAPort runs net/http (HTTP/1.1 and h2c) and grpc-go's
// own transport behind one router, with real clients of each kind.
func TestRealServersShareAPort(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := New(inner, Config{HeaderTimeout: 5 * time.Second})
	defer r.Close()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(r.GRPC()) }()
	defer gs.Stop()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.WriteString(w, req.Proto)
	})}
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(r.HTTP()) }()
	defer hs.Close()
	addr := inner.Addr().String()

	h1 := &http.Client{Timeout: 5 * time.Second}
	h2tp := &http.Transport{Protocols: new(http.Protocols)}
	h2tp.Protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Timeout: 5 * time.Second, Transport: h2tp}
	for name, c := range map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2.0": h2} {
		for range 3 { // the same connection, again and again
			resp, err := c.Get("http://" + addr + "/")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != name {
				t.Fatalf("%s client served as %q", name, body)
			}
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("gRPC: %v", err)
		}
	}
}

// pipeListener is an in-memory listener whose connections are net.Pipe
// ends.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	go func() {
		select {
		case l.conns <- server:
		case <-l.closed:
		}
	}()
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
