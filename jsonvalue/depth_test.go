package jsonvalue

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestDepthBound: whatever the transcoder accepts, protobuf decodes (its
// limit is 10,000 nested messages), and deeper JSON is refused.
func TestDepthBound(t *testing.T) {
	for _, tc := range []struct {
		open, close string
	}{{`{"a":`, `}`}, {`[`, `]`}} {
		ok := strings.Repeat(tc.open, maxDepth-1) + "1" + strings.Repeat(tc.close, maxDepth-1)
		out, err := AppendValue(nil, []byte(ok))
		if err != nil {
			t.Fatalf("%s x %d: %v", tc.open, maxDepth-1, err)
		}
		if err := proto.Unmarshal(out, &structpb.Value{}); err != nil {
			t.Fatalf("%s x %d does not decode: %v", tc.open, maxDepth-1, err)
		}
		deep := strings.Repeat(tc.open, maxDepth+1) + "1" + strings.Repeat(tc.close, maxDepth+1)
		if _, err := AppendValue(nil, []byte(deep)); err == nil {
			t.Fatalf("%s x %d accepted", tc.open, maxDepth+1)
		}
	}
}
