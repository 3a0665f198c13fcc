package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// BenchmarkGRPCExternalGet is GetDocument over the relay's port, as an
// external gRPC caller makes it (HTTP/2, the relay's codec), from parallel
// clients, for Brom (18 KB) and Aria (33 KB) read by the player Alice. It
// reports the process's CPU time per call (cpu-ns/op, steadier than wall
// time on a shared machine). The `server` runs leave the response
// undecoded (the client keeps the bytes), so that they measure the relay;
// the `client` runs decode it into the generated message, as a Go caller
// does.
func BenchmarkGRPCExternalGet(b *testing.B) {
	r, key := benchRelay(b)
	for _, doc := range []struct{ name, uuid string }{{"brom", relaytest.BromUUID}, {"aria", relaytest.AriaUUID}} {
		for _, decode := range []bool{false, true} {
			name := doc.name + "/server"
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if decode {
				name = doc.name + "/client"
			} else {
				opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(undecoded{encoding.GetCodecV2("proto")})))
			}
			b.Run(name, func(b *testing.B) {
				conn, err := grpc.NewClient(r.Addr(), opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				client := relayv1.NewDocumentServiceClient(conn)
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
				req := &relayv1.GetDocumentRequest{Uuid: doc.uuid, UserId: "Alice"}
				if _, err := client.GetDocument(ctx, req); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetParallelism(4)
				start := processCPU()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := client.GetDocument(ctx, req); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkRESTGetCPU is BenchmarkRESTGet for Brom and Aria, with the
// process's CPU time per call.
func BenchmarkRESTGetCPU(b *testing.B) {
	r, key := benchRelay(b)
	c := benchClient()
	for _, doc := range []struct{ name, uuid string }{{"brom", relaytest.BromUUID}, {"aria", relaytest.AriaUUID}} {
		b.Run(doc.name, func(b *testing.B) {
			url := fmt.Sprintf("http://%s/get?uuid=%s&userId=Alice", r.Addr(), doc.uuid)
			b.ReportAllocs()
			b.SetParallelism(4)
			start := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := newBenchGet(url, key)
					doBench(b, c, req, nil)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// undecoded is a client codec that encodes requests as protobuf and keeps
// responses undecoded: the benchmark then measures the server, not the
// client's decoding.
type undecoded struct{ encoding.CodecV2 }

func (c undecoded) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(proto.Message); ok {
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// newBenchGet is a GET request with the key.
func newBenchGet(url, key string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", key)
	return req, nil
}
