package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/wire"
)

// grpcOverHTTP is one gRPC call sent by hand over an HTTP/2 client: the
// framed request message, and the response's messages and status.
type grpcOverHTTP struct {
	httpStatus int
	messages   [][]byte
	status     *status.Status
}

// callGRPCOverHTTP makes a gRPC call through an HTTP/2 client, so that
// the test chooses which connection carries it (the client's), and
// returns what came back. With msg nil, only a message's length prefix is
// sent, announcing a message of announce bytes.
func callGRPCOverHTTP(t *testing.T, client *http.Client, addr, method, key string, msg proto.Message, announce int) grpcOverHTTP {
	t.Helper()
	var body []byte
	if msg != nil {
		data, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		body = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(data)))
		body = append(body, data...)
	} else {
		body = binary.BigEndian.AppendUint32([]byte{0}, uint32(announce))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if key != "" {
		req.Header.Set(wire.APIKeyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	out := grpcOverHTTP{httpStatus: resp.StatusCode}
	data, _ := io.ReadAll(resp.Body)
	for len(data) >= 5 {
		n := int(binary.BigEndian.Uint32(data[1:5]))
		if len(data) < 5+n {
			t.Fatalf("%s: a message cut short", method)
		}
		out.messages = append(out.messages, data[5:5+n])
		data = data[5+n:]
	}
	fields := resp.Trailer
	if resp.Header.Get("Grpc-Status") != "" {
		fields = resp.Header // a status-only answer
	}
	if code, err := strconv.Atoi(fields.Get("Grpc-Status")); err == nil {
		st := &spb.Status{Code: int32(code), Message: fields.Get("Grpc-Message")}
		if raw := fields.Get("Grpc-Status-Details-Bin"); raw != "" {
			if b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(raw, "=")); err == nil {
				_ = proto.Unmarshal(b, st)
			}
		}
		out.status = status.FromProto(st)
	}
	return out
}

// TestGRPCAndRESTShareThePort: on the shared port each connection keeps
// the server its first request chose. gRPC clients are served by gRPC's
// own transport (its size refusal is grpc-go's); a gRPC call on an h2c
// connection that began with REST is still served, by the HTTP server's
// compatibility path (its size refusal is the relay's, with TOO_LARGE);
// a REST request on a connection that began with gRPC is refused with 415.
func TestGRPCAndRESTShareThePort(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	getAria := &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}
	const getDocument = "/relay.v1.DocumentService/GetDocument"

	t.Run("REST first, then gRPC on the same connection", func(t *testing.T) {
		client := h2cClient()
		defer client.CloseIdleConnections()
		resp, err := client.Get(tr.Base + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("h2c healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		got := callGRPCOverHTTP(t, client, tr.Addr(), getDocument, admin, getAria, 0)
		if got.status.Code() != codes.OK || len(got.messages) != 1 {
			t.Fatalf("gRPC after REST: %v, %d messages", got.status, len(got.messages))
		}
		var doc relayv1.GetDocumentResponse
		if err := proto.Unmarshal(got.messages[0], &doc); err != nil || !bytes.Contains(valueJSON(t, doc.GetDocument()), []byte("Aria Vale")) {
			t.Fatalf("gRPC after REST: %v %.100s", err, doc.GetDocument())
		}
		tooLarge := callGRPCOverHTTP(t, client, tr.Addr(), getDocument, admin, nil, 1<<20)
		wantTooLarge(t, "an oversized gRPC call after REST", tooLarge.status.Err(), "Request message too large: the limit is 65536 bytes")
		if open := tr.Conns().Stats().Open; open != 1 {
			t.Fatalf("%d connections open, want the one", open)
		}
	})

	t.Run("gRPC first, then REST on the same connection", func(t *testing.T) {
		client := h2cClient()
		defer client.CloseIdleConnections()
		got := callGRPCOverHTTP(t, client, tr.Addr(), "/grpc.health.v1.Health/Check", "", &healthpb.HealthCheckRequest{}, 0)
		if got.status.Code() != codes.OK {
			t.Fatalf("health over gRPC: %v", got.status)
		}
		tooLarge := callGRPCOverHTTP(t, client, tr.Addr(), getDocument, admin, nil, 1<<20)
		if st := tooLarge.status; st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
			t.Fatalf("an oversized call on gRPC's own transport: %v", st)
		}
		resp, err := client.Get(tr.Base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Fatalf("REST on a gRPC connection: %d, want 415", resp.StatusCode)
		}
	})

	t.Run("gRPC clients", func(t *testing.T) {
		conn, ctx := tr.grpcClient(t)
		if _, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, getAria); err != nil {
			t.Fatal(err)
		}
		// Refused from its headers, with the details of the refusal.
		bad := metadata.AppendToOutgoingContext(context.Background(), wire.APIKeyHeader, "rk_bogus")
		_, err := relayv1.NewDocumentServiceClient(conn).GetDocument(bad, getAria)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a bad key: %v", err)
		}
		// Headers over the HTTP server's limit (64 KiB) are refused here
		// too, and the connection goes on.
		big := metadata.AppendToOutgoingContext(ctx, "x-padding", strings.Repeat("p", 70<<10))
		if _, err := relayv1.NewDocumentServiceClient(conn).GetDocument(big, getAria); err == nil {
			t.Fatal("a call with 70 KiB of headers was served")
		}
		if _, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, getAria); err != nil {
			t.Fatalf("after the oversized headers: %v", err)
		}
	})
}

// TestGRPCListen: --grpc-listen serves gRPC alone on a port of its own,
// with the same admission; its connections count against the same caps as
// the shared port's.
func TestGRPCListen(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.GRPCListen = "127.0.0.1:0"
		c.MaxConnsPerIP = 2
		c.ReadHeaderTimeout = time.Minute
	})
	if tr.GRPCAddr() == "" || tr.GRPCAddr() == tr.Addr() {
		t.Fatalf("gRPC port %q beside %q", tr.GRPCAddr(), tr.Addr())
	}
	conn, err := grpc.NewClient(tr.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), wire.APIKeyHeader, tr.AdminKey)
	docs := relayv1.NewDocumentServiceClient(conn)
	resp, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID})
	if err != nil || !bytes.Contains(valueJSON(t, resp.GetDocument()), []byte("Aria Vale")) {
		t.Fatalf("GetDocument on the gRPC port: %v", err)
	}
	if _, err := docs.GetDocument(t.Context(), &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key on the gRPC port: %v", err)
	}
	// REST has no business there: HTTP/1.1 gets no answer, h2c gets 415.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + tr.GRPCAddr() + "/healthz"); err == nil {
		t.Fatal("HTTP/1.1 on the gRPC port was answered")
	}
	h2 := h2cClient()
	if resp, err := h2.Get("http://" + tr.GRPCAddr() + "/healthz"); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("h2c REST on the gRPC port: %v %v", resp, err)
	}
	h2.CloseIdleConnections()
	waitOpen(t, tr, 1, 30*time.Second) // the gRPC client's
	// One more connection on the shared port fills the address's two;
	// the next, on either port, is refused.
	held, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitOpen(t, tr, 2, 30*time.Second)
	before := tr.Conns().Stats().RefusedPerIP
	other, err := grpc.NewClient(tr.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	short, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(other).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a third connection from one address was served on the gRPC port")
	}
	if tr.Conns().Stats().RefusedPerIP == before {
		t.Fatal("the refusal on the gRPC port was not counted")
	}
}

// TestServeFlagsOfTransport: the flags of the transport and of the
// garbage collector are documented with their variables and defaults, and
// a --gogc that is not a positive percentage is refused before anything
// starts.
func TestServeFlagsOfTransport(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("RELAY_GOGC", "")
	var help bytes.Buffer
	if err := serveCommand(context.Background(), []string{"--help"}, io.Discard, &help); err == nil {
		t.Fatal("--help did not stop the command")
	}
	for _, want := range []string{
		"-grpc-listen host:port", "(RELAY_GRPC_LISTEN)", "each connection goes to gRPC's own transport or to the HTTP server by its first request",
		"-gogc percent", "(RELAY_GOGC) (default 400)",
	} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("relay serve --help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"--gogc", "0"}, {"--gogc", "-5"}} {
		err := serveCommand(context.Background(), append([]string{"--data", t.TempDir()}, args...), io.Discard, io.Discard)
		var uerr usageError
		if !errors.As(err, &uerr) || !strings.Contains(err.Error(), "--gogc must be a positive percentage") {
			t.Errorf("serve %v: %v", args, err)
		}
	}
}

// TestSlowGRPCMessages: on gRPC's own transport a message must arrive whole
// within --body-read-timeout plus the time --max-body-bytes takes at
// --body-min-rate; a caller that trickles one has its call ended with
// DEADLINE_EXCEEDED while others are served; one that sends at a steady
// pace is served.
func TestSlowGRPCMessages(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.BodyReadTimeout = 500 * time.Millisecond
		c.BodyMinRate = 64 << 10 // with 64 KiB messages: 1.5 s a message
	})
	const allowance = 1500 * time.Millisecond
	trickled := func() (codes.Code, time.Duration) {
		body, w := io.Pipe()
		defer w.Close()
		go func() {
			if _, err := w.Write(binary.BigEndian.AppendUint32([]byte{0}, 1000)); err != nil {
				return
			}
			for {
				time.Sleep(200 * time.Millisecond)
				if _, err := w.Write([]byte{0x0a}); err != nil {
					return
				}
			}
		}()
		req, _ := http.NewRequest(http.MethodPost, tr.Base+"/relay.v1.DocumentService/GetDocument", body)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set(wire.APIKeyHeader, tr.AdminKey)
		client := h2cClient()
		defer client.CloseIdleConnections()
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("trickled call: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fields := resp.Trailer
		if resp.Header.Get("Grpc-Status") != "" {
			fields = resp.Header // a status-only answer
		}
		code, err := strconv.Atoi(fields.Get("Grpc-Status"))
		if err != nil {
			t.Fatalf("trickled call: no status in %v %v", resp.Header, resp.Trailer)
		}
		return codes.Code(code), time.Since(start)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, took := trickled()
		if code != codes.DeadlineExceeded || took < allowance/2 || took > allowance+5*time.Second {
			t.Errorf("a trickled message: %v after %v (allowance %v)", code, took, allowance)
		}
	}()
	// Meanwhile others are served at once.
	conn, ctx := tr.grpcClient(t)
	start := time.Now()
	if _, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}); err != nil || time.Since(start) > time.Second {
		t.Fatalf("beside a trickled call: %v after %v", err, time.Since(start))
	}
	<-done
	// A steady upload, at twice the minimum rate, takes longer than the
	// allowance of one message and is served: each chunk has its own.
	data := bytes.Repeat([]byte("steady upload..."), (256<<10)/16)
	up, err := relayv1.NewFileServiceClient(conn).UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&relayv1.UploadFileRequest{Path: "steady", Filename: "grpc.bin"}); err != nil {
		t.Fatal(err)
	}
	for sent := 0; sent < len(data); sent += 16 << 10 {
		if err := up.Send(&relayv1.UploadFileRequest{Chunk: data[sent : sent+16<<10]}); err != nil {
			break
		}
		time.Sleep(125 * time.Millisecond)
	}
	if res, err := up.CloseAndRecv(); err != nil || res.GetSize() != float64(len(data)) {
		t.Fatalf("a steady upload: %v %v", res, err)
	}
}
