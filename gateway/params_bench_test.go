package gateway

import (
	"os"
	"syscall"
	"testing"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// BenchmarkUpdateRequest measures turning a REST update's body into the
// world's values (what the gateway and then the service do), for a small
// diff and for a whole 18 KB actor as data:
//
//   - struct: protojson decodes the body into the request message, data
//     becoming a google.protobuf.Struct tree, which the service then
//     converts to plain values (AsMap): the way before raw Structs;
//   - raw: the gateway hands data over as its JSON text (a raw Struct),
//     which the service decodes directly (jsonvalue.DecodeObject): now.
func BenchmarkUpdateRequest(b *testing.B) {
	actor, err := os.ReadFile("../jsonvalue/testdata/brom.json")
	if err != nil {
		b.Fatal(err)
	}
	bodies := []struct{ name, body string }{
		{"diff", `{"uuid":"Actor.bromIronfist0001","data":{"system.attributes.hp.value":12,"flags.relay.note":"hit by a goblin"}}`},
		{"actor", `{"uuid":"Actor.bromIronfist0001","data":` + string(actor) + `}`},
	}
	for _, bd := range bodies {
		body := []byte(bd.body)
		b.Run(bd.name+"/struct", func(b *testing.B) {
			b.ReportAllocs()
			start := cpuNow()
			for b.Loop() {
				req := &relayv1.UpdateDocumentRequest{}
				fields, err := mergeFields(req.ProtoReflect().Descriptor(), body, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := paramsJSON.Unmarshal(appendObject(nil, fields), req); err != nil {
					b.Fatal(err)
				}
				if len(req.GetData().AsMap()) == 0 {
					b.Fatal("no data")
				}
			}
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		})
		b.Run(bd.name+"/raw", func(b *testing.B) {
			b.ReportAllocs()
			start := cpuNow()
			for b.Loop() {
				req := &relayv1.UpdateDocumentRequest{}
				if err := decodeParams(req, body, nil); err != nil {
					b.Fatal(err)
				}
				data, err := jsonvalue.DecodeObject(req.GetData())
				if err != nil || len(data) == 0 {
					b.Fatal("no data", err)
				}
			}
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuNow is the CPU time the process has used (cpu-ns/op varies less
// than wall time on a shared machine).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
