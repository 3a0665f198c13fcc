package gateway

import (
	"context"
	"strings"
	"testing"
)

// TestResponseBufferReuse marshals answers of different sizes one after
// another through recycled buffers: each must come out whole and exact,
// whatever the previous one left in the buffer.
func TestResponseBufferReuse(t *testing.T) {
	m := newJSONMarshaler()
	for i, data := range []string{
		`{"big":"` + strings.Repeat("x", 40000) + `"}`,
		`{"small":1}`,
		`[` + strings.Repeat(`1,`, 30000) + `2]`,
		`{"small":2}`,
	} {
		_, claim := withResponseBuffer(context.Background())
		env := &envelope{Type: "get-result", RequestID: "get_1", Data: []byte(data), buffer: claim}
		got, err := m.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"type":"get-result","requestId":"get_1","data":` + data + `}`
		if string(got) != want {
			t.Fatalf("answer %d: got %d bytes starting %.60q, want %d bytes starting %.60q", i, len(got), got, len(want), want)
		}
		if claim.buf == nil {
			t.Fatalf("answer %d did not use a recycled buffer", i)
		}
		claim.release()
		if claim.buf != nil {
			t.Fatalf("answer %d: the claim kept its buffer after release", i)
		}
	}
	// Without a claim (an answer outside serveHTTP), a fresh buffer is used.
	got, err := m.Marshal(&envelope{Type: "t", RequestID: "r", Data: []byte(`{}`)})
	if err != nil || string(got) != `{"type":"t","requestId":"r","data":{}}` {
		t.Fatalf("unclaimed answer: %q, %v", got, err)
	}
}
