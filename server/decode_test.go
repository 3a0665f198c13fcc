package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
)

// TestRequestCodecMarksUndecodable: a message the codec cannot decode is
// handed on empty with a marker that undecodable turns into
// InvalidArgument; a good message is decoded as grpc-go's codec does.
func TestRequestCodecMarksUndecodable(t *testing.T) {
	codec := newServerCodec()
	good, _ := proto.Marshal(wrapperspb.String("hi"))
	var m wrapperspb.StringValue
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(good)}, &m); err != nil || m.GetValue() != "hi" || undecodable(&m) != nil {
		t.Fatalf("good message: %v %v", &m, err)
	}
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff, 0xff})}, &m); err != nil {
		t.Fatalf("malformed message: %v", err)
	}
	if err := undecodable(&m); status.Code(err) != codes.InvalidArgument || m.GetValue() != "" {
		t.Fatalf("malformed message: %v %v", &m, err)
	}
	var v any = 1.0
	for range 6000 {
		v = map[string]any{"a": v}
	}
	s, err := structpb.NewStruct(map[string]any{"a": v})
	if err != nil {
		t.Fatal(err)
	}
	deep, err := proto.MarshalOptions{}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got structpb.Struct
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(deep)}, &got); err != nil {
		t.Fatal(err)
	}
	if err := undecodable(&got); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nests too deeply") {
		t.Fatalf("deep message: %v", err)
	}
	// A caller cannot make a good message look undecodable by accident:
	// only the exact marker counts.
	m.Reset()
	m.ProtoReflect().SetUnknown([]byte{0x08, 0x01})
	if undecodable(&m) != nil {
		t.Fatal("an ordinary unknown field counts as the marker")
	}
}

// TestServeHTTPRefusesOversizedFirstMessage: the length prefix of a call's
// first message over the limit is answered at once with the relay's
// status, carried in a Trailers-Only response.
func TestServeHTTPRefusesOversizedFirstMessage(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	s := &Server{maxMessageBytes: 1000, log: log, chain: &Chain{Keys: anyKey{}, Log: log}}
	body := append([]byte{0, 0, 0, 0x10, 0}, make([]byte, 64)...) // announces 4096 bytes
	req := httptest.NewRequest(http.MethodPost, "/relay.v1.DocumentService/UpdateDocument", bytes.NewReader(body))
	req.ProtoMajor = 2
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set(wire.APIKeyHeader, "any")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	h := rec.Result().Header
	if rec.Code != http.StatusOK || h.Get("Grpc-Status") != "8" || h.Get("Grpc-Message") != "Request message too large: the limit is 1000 bytes" {
		t.Fatalf("answer %d %v", rec.Code, h)
	}
	if rec.Body.Len() != 0 || h.Get("Grpc-Status-Details-Bin") == "" {
		t.Fatalf("body %q, details %q", rec.Body.Bytes(), h.Get("Grpc-Status-Details-Bin"))
	}
	st := tooLargeStatus(1000)
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != wire.ReasonTooLarge {
		t.Fatalf("details %v", st.Details())
	}
	if got := percentEncode("50% of é\n"); got != "50%25 of %C3%A9%0A" {
		t.Fatalf("percentEncode: %q", got)
	}
}

// anyKey accepts every API key: the tests of the gRPC entry past its
// admission step.
type anyKey struct{}

func (anyKey) Authenticate(context.Context, string) (keys.Key, error) { return keys.Key{ID: "k"}, nil }
