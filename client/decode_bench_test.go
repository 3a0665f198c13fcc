package client_test

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/client"
)

// BenchmarkDecode is what client.Decode and client.DecodeMap cost for the
// 18 KB actor Brom, once the Value tree is received.
func BenchmarkDecode(b *testing.B) {
	raw, err := os.ReadFile("../jsonvalue/testdata/brom.json")
	if err != nil {
		b.Fatal(err)
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(raw, v); err != nil {
		b.Fatal(err)
	}
	type actor struct {
		Name   string `json:"name"`
		System struct {
			Attributes struct {
				HP struct{ Value, Max float64 } `json:"hp"`
			} `json:"attributes"`
		} `json:"system"`
	}
	b.Run("struct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a, err := client.Decode[actor](v); err != nil || a.Name == "" {
				b.Fatal(a, err)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if m, err := client.DecodeMap(v); err != nil || m["name"] == nil {
				b.Fatal(err)
			}
		}
	})
}
