package link

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestWithUUID(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                       `{"uuid":"Actor.a"}`,
		` { }`:                     `{"uuid":"Actor.a" }`,
		`{"name":"x"}`:             `{"uuid":"Actor.a","name":"x"}`,
		`{"name":"x","uuid":"y"}`:  `{"name":"x","uuid":"y"}`,
		`{"items":[{"uuid":"z"}]}`: `{"uuid":"Actor.a","items":[{"uuid":"z"}]}`,
		`[1]`:                      `[1]`,
	} {
		if got := string(withUUID([]byte(in), "Actor.a")); got != want {
			t.Errorf("withUUID(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestLevelBelow(t *testing.T) {
	for _, c := range []struct {
		dir, entry string
		want       int
	}{
		{"", "maps", 1}, {"", "maps/a.png", 2}, {"maps", "maps/a.png", 1}, {"maps", "maps/x/y/a.png", 3}, {"maps", "/maps/a.png", 1},
	} {
		if got := levelBelow(c.dir, c.entry); got != c.want {
			t.Errorf("levelBelow(%q, %q) = %d, want %d", c.dir, c.entry, got, c.want)
		}
	}
}

// replyOf is an `entity` reply holding a document of about n items.
func replyOf(n int) []byte {
	items := make([]any, n)
	for i := range items {
		items[i] = map[string]any{"_id": strings.Repeat("i", 16), "name": "Longsword", "type": "weapon",
			"system": map[string]any{"description": map[string]any{"value": strings.Repeat("<p>A blade.</p>", 20)}, "quantity": 1, "weight": 3.5}}
	}
	doc := map[string]any{"_id": "a1", "name": "Hero", "type": "character", "items": items, "system": map[string]any{"hp": 10}}
	raw, _ := json.Marshal(map[string]any{"type": "entity-result", "requestId": "entity_1", "uuid": "Actor.a1", "data": doc})
	return raw
}

func TestReadReply(t *testing.T) {
	raw := replyOf(3)
	r, ok := readReply(raw)
	var want map[string]json.RawMessage
	if err := json.Unmarshal(raw, &want); !ok || err != nil || len(r) != len(want) {
		t.Fatalf("readReply: %v %v", ok, err)
	}
	for k, v := range want {
		if !bytes.Equal(r[k], v) {
			t.Errorf("%s: %s, want %s", k, r[k], v)
		}
	}
	for _, bad := range []string{`[1]`, `{"a":1`, `nul`, ``} {
		if _, ok := readReply([]byte(bad)); ok {
			t.Errorf("readReply(%q) succeeded", bad)
		}
	}
	// A large reply is checked whole.
	large := append(replyOf(3000), ' ')
	large[len(large)-2], large[len(large)-1] = ',', '}'
	if len(large) <= chunkMax {
		t.Fatalf("the large reply has only %d bytes", len(large))
	}
	if _, ok := readReply(large); ok {
		t.Error("readReply took a large reply that is not JSON")
	}
}

// BenchmarkReadReply compares splitting an `entity` reply of about 80 KB
// into its fields with decoding it into a map, as the relay did.
func BenchmarkReadReply(b *testing.B) {
	raw := replyOf(100)
	b.Run("split", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			r, _ := readReply(raw)
			_ = withUUID(r["data"], "Actor.a1")
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var r map[string]json.RawMessage
			_ = json.Unmarshal(raw, &r)
			_ = withUUID(r["data"], "Actor.a1")
		}
	})
}
