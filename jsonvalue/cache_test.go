package jsonvalue

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// externalized encodes a message holding text as a raw Value (a
// ListValue, whose values are Values as a response's fields are) the way
// the gRPC codec does, and returns the Value a gRPC caller decodes.
func externalized(t *testing.T, text []byte) *structpb.Value {
	t.Helper()
	list := &structpb.ListValue{Values: []*structpb.Value{Raw(text)}}
	src, err := proto.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Externalize(nil, src, list.ProtoReflect().Descriptor())
	if err != nil {
		t.Fatal(err)
	}
	var got structpb.ListValue
	if err := proto.Unmarshal(out, &got); err != nil || len(got.GetValues()) != 1 {
		t.Fatalf("%v %v", err, &got)
	}
	return got.GetValues()[0]
}

// TestCacheNeverAnswersForAnotherText: the same text is served from the
// cache, and a text of the same length in the same memory but with other
// content is transcoded, never given the first one's encoding (even when
// their hashes collide, which the test forces).
func TestCacheNeverAnswersForAnotherText(t *testing.T) {
	text := []byte(`{"name":"` + strings.Repeat("a", 4<<10) + `"}`)
	want := func(text []byte) *structpb.Value {
		v := &structpb.Value{}
		if err := protojson.Unmarshal(text, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := externalized(t, text)
	if !proto.Equal(first, want(text)) {
		t.Fatal("first transcoding wrong")
	}
	if _, _, ok := transcoded.get(text); !ok {
		t.Fatal("a large text was not kept")
	}
	if again := externalized(t, text); !proto.Equal(again, first) {
		t.Fatal("the cached encoding differs")
	}
	// The same memory, other content of the same length.
	old := bytes.Clone(text)
	copy(text[9:], bytes.Repeat([]byte("b"), 4<<10))
	if got := externalized(t, text); !proto.Equal(got, want(text)) {
		t.Fatalf("served the old text's encoding: %.40v", got)
	}
	// A collision: the old text's entry filed under the new text's key.
	wire, _, _ := transcoded.get(old)
	transcoded.put(keyOf(text), old, wire)
	if got := externalized(t, text); !proto.Equal(got, want(text)) {
		t.Fatalf("a colliding entry answered: %.40v", got)
	}
	// Small texts are not kept.
	small := []byte(`{"a":1}`)
	externalized(t, small)
	if _, _, ok := transcoded.get(small); ok {
		t.Fatal("a small text was kept")
	}
}

// TestCacheBounded: the cache drops its oldest entries past its limit.
func TestCacheBounded(t *testing.T) {
	c := &wireCache{entries: map[cacheKey]cacheEntry{}, limit: 64 << 10}
	var texts [][]byte
	for i := range 40 {
		text := []byte(fmt.Sprintf(`"%d%s"`, i, strings.Repeat("x", 3<<10)))
		texts = append(texts, text)
		c.put(keyOf(text), text, text)
		if c.bytes > c.limit {
			t.Fatalf("holds %d bytes, over its limit of %d", c.bytes, c.limit)
		}
	}
	if _, _, ok := c.get(texts[0]); ok {
		t.Fatal("the oldest entry is still there")
	}
	if _, _, ok := c.get(texts[39]); !ok {
		t.Fatal("the newest entry is gone")
	}
	if len(c.order) != len(c.entries) {
		t.Fatalf("%d keys queued for %d entries", len(c.order), len(c.entries))
	}
}
