package gateway

import (
	"net/http"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/wire"
)

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	withReason := func(code codes.Code, reason string) *status.Status {
		st, err := status.New(code, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "relay"})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	tests := []struct {
		st   *status.Status
		want int
	}{
		{status.New(codes.InvalidArgument, "x"), http.StatusBadRequest},
		{status.New(codes.Unauthenticated, "x"), http.StatusUnauthorized},
		{status.New(codes.PermissionDenied, "x"), http.StatusForbidden},
		{status.New(codes.NotFound, "x"), http.StatusNotFound},
		{status.New(codes.AlreadyExists, "x"), http.StatusConflict},
		{status.New(codes.Unavailable, "x"), http.StatusServiceUnavailable},
		{status.New(codes.DeadlineExceeded, "x"), http.StatusGatewayTimeout},
		{status.New(codes.Unimplemented, "x"), http.StatusNotImplemented},
		{withReason(codes.ResourceExhausted, wire.ReasonTooLarge), http.StatusRequestEntityTooLarge},
		{withReason(codes.ResourceExhausted, wire.ReasonRateLimited), http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		if got := httpStatus(tt.st); got != tt.want {
			t.Errorf("%v: got %d, want %d", tt.st.Code(), got, tt.want)
		}
	}
}

func TestEnvelopeEncoding(t *testing.T) {
	t.Parallel()
	m := newJSONMarshaler()
	tests := []struct {
		name string
		data any
		want string
	}{
		{"every field, zero values and nulls", &relayv1.Combatant{Name: "Goblin \"A\"\n"},
			`{"id":"","name":"Goblin \"A\"\n","tokenUuid":"","actorUuid":"","img":"","initiative":null,"hidden":false,"defeated":false}`},
		{"wrapper with a value", &relayv1.Combatant{Initiative: wrapperspb.Double(12.5)},
			`{"id":"","name":"","tokenUuid":"","actorUuid":"","img":"","initiative":12.5,"hidden":false,"defeated":false}`},
		{"raw JSON spliced and compacted", &relayv1.UpdateDocumentResponse{Uuid: "Actor.a", Document: jsonvalue.Raw([]byte("{\"a\": [1, 2],\n \"b\": null}"))},
			`{"uuid":"Actor.a","document":{"a":[1,2],"b":null}}`},
		{"raw JSON unset is null", &relayv1.UpdateDocumentResponse{}, `{"uuid":"","document":null}`},
		{"a Value tree is encoded", &relayv1.UpdateDocumentResponse{Document: structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewStringValue("x")}})},
			`{"uuid":"","document":[1,"x"]}`},
		{"response_body bytes", []byte(`{"name":"x"}`), `{"name":"x"}`},
		{"map keys sorted", &relayv1.ApiKey{ClientUsers: map[string]string{"b": "2", "a": "1"}},
			`{"id":"","name":"","prefix":"","scopes":[],"clientIds":[],"scopedUserId":"","clientUsers":{"a":"1","b":"2"},"expiresAt":"","enabled":false,"createdAt":"","revokedAt":"","createdBy":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := m.Marshal(&envelope{Type: "t-result", RequestID: "t_1", Data: tt.data})
			if err != nil {
				t.Fatal(err)
			}
			want := `{"type":"t-result","requestId":"t_1","data":` + tt.want + `}`
			if string(got) != want {
				t.Fatalf("\n got %s\nwant %s", got, want)
			}
		})
	}
}
