package gateway

import (
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

func TestMergeParams(t *testing.T) {
	t.Parallel()
	details := (&relayv1.GetActorDetailsRequest{}).ProtoReflect().Descriptor()
	update := (&relayv1.UpdateDocumentRequest{}).ProtoReflect().Descriptor()
	search := (&relayv1.SearchDocumentsRequest{}).ProtoReflect().Descriptor()
	rest := (&relayv1.ShortRestRequest{}).ProtoReflect().Descriptor()
	transfer := (&relayv1.TransferCurrencyRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		name  string
		md    protoreflect.MessageDescriptor
		body  string
		query string
		want  string // JSON, compared as values
		err   string
	}{
		{"query only", search, "", "clientId=demo&query=Aria&limit=5", `{"clientId":"demo","query":"Aria","limit":5}`, ""},
		{"body wins over query", search, `{"query":"Brom"}`, "query=Aria", `{"query":"Brom"}`, ""},
		{"query fills what the body lacks", update, `{"data":{"name":"X"}}`, "clientId=demo&uuid=Actor.a", `{"clientId":"demo","uuid":"Actor.a","data":{"name":"X"}}`, ""},
		{"JSON array in query", details, "", `details=["items","spells"]`, `{"details":["items","spells"]}`, ""},
		{"repeated keys in query", details, "", "details=items&details=spells", `{"details":["items","spells"]}`, ""},
		{"comma list in query", details, "", "details=items,spells", `{"details":["items","spells"]}`, ""},
		{"bool and double from query", rest, "", "autoHD=true&autoHDThreshold=0.25", `{"autoHD":true,"autoHDThreshold":0.25}`, ""},
		{"bool given as string in body", rest, `{"autoHD":"false"}`, "", `{"autoHD":false}`, ""},
		{"proto names accepted", search, "", "client_id=demo", `{"clientId":"demo"}`, ""},
		{"unknown parameters ignored", search, `{"nonsense":1}`, "other=2", `{}`, ""},
		{"null is absent", search, `{"query":null}`, "query=Aria", `{"query":"Aria"}`, ""},
		{"nested message checked", transfer, `{"currency":{"gp":"5"}}`, "", `{"currency":{"gp":5}}`, ""},
		{"nested message member named", transfer, `{"currency":{"gp":"lots"}}`, "", "", "'currency.gp' must be a number"},
		{"nested message member unknown", transfer, `{"currency":{"gold":5}}`, "", "", "'currency.gold' is not one of its members (pp, gp, ep, sp, cp)"},
		{"nested message with known members", transfer, `{"currency":{"gp":5,"sp":1}}`, "", `{"currency":{"gp":5,"sp":1}}`, ""},
		{"not a number", rest, `{"autoHDThreshold":"NaN"}`, "", "", "'autoHDThreshold' must be a number"},
		{"infinity in a query", rest, "", "autoHDThreshold=Infinity", "", "'autoHDThreshold' must be a number"},
		{"out of range", search, "", "limit=2147483648", "", "'limit' is out of range"},
		{"number with spaces", search, `{"limit":" 7 "}`, "", `{"limit":7}`, ""},
		{"bare flag", rest, "", "autoHD", `{"autoHD":true}`, ""},
		{"array element checked", details, `{"details":["items",5]}`, "", "", "'details' must be a string"},
		{"object in query", update, "", `data={"name":"X"}`, `{"data":{"name":"X"}}`, ""},
		{"body not an object", search, `[1,2]`, "", "", "The request body must be a JSON object"},
		{"body not JSON", search, `{"query":`, "", "", "The request body must be a JSON object"},
		{"bad number", search, "", "limit=ten", "", "'limit' must be a number"},
		{"fraction for an integer", search, `{"limit":2.5}`, "", "", "'limit' must be a whole number"},
		{"bad bool", rest, "", "autoHD=maybe", "", "'autoHD' must be true or false"},
		{"string expected", search, `{"query":5}`, "", "", "'query' must be a string"},
		{"object expected", update, `{"data":"x"}`, "", "", "'data' must be a JSON object"},
		{"array expected", details, `{"details":"items"}`, "", "", "'details' must be an array"},
		{"bad array in query", details, "", `details=["items"`, "", "'details' must be an array"},
		{"past the decoder's depth", update, `{"data":{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`, "", "", "The request body nests deeper than 10000 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got := newMessage(tt.md)
			err = decodeParams(got, []byte(tt.body), q)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if _, err := mergeParams(tt.md, []byte(tt.body), q); err == nil || err.Error() != tt.err {
					t.Fatalf("mergeParams: err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := newMessage(tt.md)
			if err := protojson.Unmarshal([]byte(tt.want), want); err != nil {
				t.Fatal(err)
			}
			// Struct parameters are raw Structs (see decodeFields): compare
			// what the message stands for, through its JSON.
			text, err := appendMessage(nil, got.ProtoReflect())
			if err != nil {
				t.Fatal(err)
			}
			reread := newMessage(tt.md)
			if err := protojson.Unmarshal(text, reread); err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			if !proto.Equal(reread, want) {
				t.Fatalf("got %s, want %s", text, tt.want)
			}
		})
	}
}

// TestStringParamsAllocations: the plain string parameters of a call (its
// world, user and uuid) are set on a generated request without boxing
// them: what remains is the merging of the parameters and one string for
// each value.
func TestStringParamsAllocations(t *testing.T) {
	query := url.Values{"clientId": {"demo"}, "userId": {"Alice"}, "uuid": {"Actor.ariaVale00000001"}}
	var req relayv1.GetDocumentRequest
	if err := decodeParams(&req, nil, query); err != nil {
		t.Fatal(err)
	}
	if req.ClientId != "demo" || req.UserId != "Alice" || req.Uuid != "Actor.ariaVale00000001" {
		t.Fatalf("decoded %v", &req)
	}
	// The same through a dynamic message, which protoreflect sets.
	dyn := dynamicpb.NewMessage(req.ProtoReflect().Descriptor())
	if err := decodeParams(dyn, nil, query); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(dyn, &req) {
		t.Errorf("dynamic message decoded as %v, want %v", dyn, &req)
	}
	n := testing.AllocsPerRun(100, func() {
		req.Reset()
		_ = decodeParams(&req, nil, query)
	})
	// The merged map, a JSON string per value, a Go string per value.
	if n > 10 {
		t.Errorf("%v allocations to decode three string parameters, want at most 10", n)
	}
}
