package jsonvalue

import (
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// The documents of the benchmarks are the demo world's actors as the
// player Alice reads them, the JSON text the world hands over: Brom
// (18 KB) and Aria (33 KB, with her spells).
var benchDocs = []string{"brom", "aria"}

// BenchmarkGetDocumentResponse measures what encoding a GetDocument
// response for a gRPC caller costs, per way of carrying the document:
//
//   - bytes: the contract before Values, a bytes field holding the JSON
//     (what the relay's codec did: one copy of the text);
//   - raw-cold: a raw Value, encoded and then rewritten with the Value
//     tree transcoded from the text (the relay's codec, for a text it has
//     not seen);
//   - raw-cached: the same for a text it has seen (the common case of a
//     document read again), whose encoding the cache gives;
//   - tree: the text parsed by protojson into a Value tree, then encoded
//     (the obvious way, for comparison);
//
// and what a Go client then pays to decode the Value tree it receives.
func BenchmarkGetDocumentResponse(b *testing.B) {
	for _, name := range benchDocs {
		raw, err := os.ReadFile("testdata/" + name + ".json")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/bytes", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			buf := make([]byte, 0, 2*len(raw))
			start := cpuTime()
			defer reportCPU(b, start)
			for b.Loop() {
				var err error
				if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], wrapperspb.Bytes(raw)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/raw-cold", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			scratch := make([]byte, 0, 2*len(raw))
			out := make([]byte, 0, 2*len(raw))
			md := (&relayv1.GetDocumentResponse{}).ProtoReflect().Descriptor()
			start := cpuTime()
			defer reportCPU(b, start)
			for b.Loop() {
				resp := &relayv1.GetDocumentResponse{Document: Raw(raw)}
				var err error
				if scratch, err = (proto.MarshalOptions{}).MarshalAppend(scratch[:0], resp); err != nil {
					b.Fatal(err)
				}
				if out, err = externalize(out[:0], scratch, md, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/raw-cached", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			scratch := make([]byte, 0, 2*len(raw))
			out := make([]byte, 0, 2*len(raw))
			md := (&relayv1.GetDocumentResponse{}).ProtoReflect().Descriptor()
			start := cpuTime()
			defer reportCPU(b, start)
			for b.Loop() {
				resp := &relayv1.GetDocumentResponse{Document: Raw(raw)}
				var err error
				if scratch, err = (proto.MarshalOptions{}).MarshalAppend(scratch[:0], resp); err != nil {
					b.Fatal(err)
				}
				if out, err = Externalize(out[:0], scratch, md); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/tree", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			buf := make([]byte, 0, 2*len(raw))
			start := cpuTime()
			defer reportCPU(b, start)
			for b.Loop() {
				v := &structpb.Value{}
				if err := protojson.Unmarshal(raw, v); err != nil {
					b.Fatal(err)
				}
				var err error
				if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], &relayv1.GetDocumentResponse{Document: v}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/client-decode", func(b *testing.B) {
			wire, err := proto.Marshal(&relayv1.GetDocumentResponse{Document: Raw(raw)})
			if err != nil {
				b.Fatal(err)
			}
			wire, err = Externalize(nil, wire, (&relayv1.GetDocumentResponse{}).ProtoReflect().Descriptor())
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(raw)))
			start := cpuTime()
			defer reportCPU(b, start)
			for b.Loop() {
				var resp relayv1.GetDocumentResponse
				if err := proto.Unmarshal(wire, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRESTSplice is what the REST side does with a raw Value: make
// it and take its text back, as the services and the gateway's encoder do
// for every read. It must stay a few nanoseconds, with no copy.
func BenchmarkRESTSplice(b *testing.B) {
	raw, err := os.ReadFile("testdata/brom.json")
	if err != nil {
		b.Fatal(err)
	}
	start := cpuTime()
	defer reportCPU(b, start)
	for b.Loop() {
		v := Raw(raw)
		if text, ok := RawJSON(v); !ok || len(text) != len(raw) {
			b.Fatal("lost the text")
		}
	}
}

// cpuTime is the CPU time the process has used, in user and system mode.
// The machines the benchmarks run on are shared and noisy: CPU time per
// operation (reported as cpu-ns/op) varies far less than wall time when
// other work competes for the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
