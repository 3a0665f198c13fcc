package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// benchRelay starts a relay for a benchmark.
func benchRelay(b *testing.B) (*node.Node, string) {
	b.Helper()
	cfg := node.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Demo: true, NodeID: 1, MaxBodyBytes: 1 << 20, ScriptTimeout: time.Second}
	r, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, r.AdminKey()
}

// benchClient keeps enough idle connections for the parallel goroutines.
func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}}
}

func doBench(b *testing.B, c *http.Client, req *http.Request, body []byte) {
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status %d", resp.StatusCode)
	}
}

// BenchmarkRESTGet is GET /get of an actor as a player, over keep-alive
// HTTP/1.1 connections from parallel clients.
func BenchmarkRESTGet(b *testing.B) {
	r, key := benchRelay(b)
	c := benchClient()
	url := fmt.Sprintf("http://%s/get?uuid=%s&userId=Alice", r.Addr(), relaytest.AriaUUID)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("x-api-key", key)
			doBench(b, c, req, nil)
		}
	})
}

// BenchmarkRESTUpdate is PUT /update of an actor's hit points, a changed
// value each time; each one is a committed SQLite transaction with
// synchronous=FULL.
func BenchmarkRESTUpdate(b *testing.B) {
	r, key := benchRelay(b)
	c := benchClient()
	url := fmt.Sprintf("http://%s/update?uuid=%s", r.Addr(), relaytest.BromUUID)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// A different value each time: an update that changes nothing
			// commits nothing and would flatter the figure.
			body := []byte(fmt.Sprintf(`{"data":{"system.attributes.hp.value":%d}}`, 1+n.Add(1)%40))
			req, _ := http.NewRequest(http.MethodPut, url, nil)
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			doBench(b, c, req, body)
		}
	})
}

// BenchmarkGRPCGet is GetDocument over the relay's in-process connection
// (what the gateway uses), without HTTP.
func BenchmarkGRPCGet(b *testing.B) {
	r, key := benchRelay(b)
	client := relayv1.NewDocumentServiceClient(r.GRPC().Local)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID, UserId: "Alice"}); err != nil {
				b.Error(err)
			}
		}
	})
}
