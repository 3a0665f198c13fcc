package gateway

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// requestDescriptors returns every request message of the contract, sorted
// by name so that a fuzz input's index always picks the same message.
func requestDescriptors(tb testing.TB) []protoreflect.MessageDescriptor {
	tb.Helper()
	_ = (&relayv1.SearchDocumentsRequest{}).ProtoReflect() // importing relayv1 registers the contract
	var out []protoreflect.MessageDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("relay.v1", func(fd protoreflect.FileDescriptor) bool {
		msgs := fd.Messages()
		for i := range msgs.Len() {
			if md := msgs.Get(i); strings.HasSuffix(string(md.Name()), "Request") {
				out = append(out, md)
			}
		}
		return true
	})
	if len(out) == 0 {
		tb.Fatal("no request messages registered")
	}
	slices.SortFunc(out, func(a, b protoreflect.MessageDescriptor) int {
		return strings.Compare(string(a.FullName()), string(b.FullName()))
	})
	return out
}

// pick returns the descriptor named name, or the one index selects.
func pick(mds []protoreflect.MessageDescriptor, index uint, name string) protoreflect.MessageDescriptor {
	for _, md := range mds {
		if string(md.Name()) == name {
			return md
		}
	}
	return mds[index%uint(len(mds))]
}

// checkMerged asserts the contract of mergeParams: a *paramError, or a JSON
// object that protojson reads into the message.
func checkMerged(t *testing.T, md protoreflect.MessageDescriptor, out []byte, err error) {
	t.Helper()
	if err != nil {
		var pe *paramError
		if !errors.As(err, &pe) {
			t.Fatalf("error %T %v is not a paramError", err, err)
		}
		if out != nil {
			t.Fatalf("output %q along with error %v", out, err)
		}
		return
	}
	var obj map[string]json.RawMessage
	if uerr := json.Unmarshal(out, &obj); uerr != nil || obj == nil {
		t.Fatalf("output %q is not a JSON object: %v", out, uerr)
	}
	// mergeParams checked it with protojson, which must read it again
	// alike, and the REST calls' decoding (decodeFields) too.
	whole := dynamicpb.NewMessage(md)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, whole); err != nil {
		t.Fatalf("%q: merged parameters protojson refuses: %v", out, err)
	}
	// decodeFields hands Struct parameters over as raw Structs, which
	// must stand for the very tree protojson reads.
	decoded := dynamicpb.NewMessage(md)
	err = decodeFields(decoded, obj)
	decoded.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return true
		}
		if raw, ok := jsonvalue.RawJSON(v.Message().Interface()); ok {
			tree := &structpb.Struct{}
			if uerr := protojson.Unmarshal(raw, tree); uerr != nil {
				t.Fatalf("%q: the raw %s does not read as a Struct: %v", out, fd.Name(), uerr)
			}
			decoded.Set(fd, protoreflect.ValueOfMessage(tree.ProtoReflect()))
		}
		return true
	})
	if err != nil || !proto.Equal(whole, decoded) {
		t.Fatalf("%q: decodeFields gives %v, %v; protojson %v", out, decoded, err, whole)
	}
}

// FuzzMergeParams feeds arbitrary bodies and query strings to every request
// message. `go test` runs the seeds; `make fuzz` explores.
func FuzzMergeParams(f *testing.F) {
	seeds := []struct {
		msg, body, query string
	}{
		{"SearchDocumentsRequest", "", "clientId=demo&query=Aria&limit=5"},
		{"SearchDocumentsRequest", `{"query":"Brom"}`, "query=Aria"},
		{"UpdateDocumentRequest", `{"data":{"name":"X"}}`, "clientId=demo&uuid=Actor.a"},
		{"GetActorDetailsRequest", "", `details=["items","spells"]`},
		{"GetActorDetailsRequest", "", "details=items&details=spells"},
		{"ShortRestRequest", `{"autoHD":"false"}`, "autoHDThreshold=1e308"},
		{"TransferCurrencyRequest", `{"currency":{"gp":"5","sp":1e400}}`, ""},
		{"UpdateDocumentRequest", "", `data={"a":{"b":[1,{"c":null}]}}`},
		{"SearchDocumentsRequest", `[1,2]`, ""},
		{"SearchDocumentsRequest", `{"limit":2.5}`, "limit=NaN"},
		{"SearchDocumentsRequest", `{"limit":"-0x10"}`, "limit=9223372036854775808"},
		{"SearchDocumentsRequest", "null", "query=%ff%fe"},
		{"GetActorDetailsRequest", `{"details":[null,1,{"a":1}]}`, ""},
		{"", `{"clientId":"\u0000","userId":{"x":[]}}`, "client_id=a&client_id=b"},
		{"", "\xef\xbb\xbf{}", ";;&&=="},
	}
	for i, s := range seeds {
		f.Add(uint(i), s.msg, []byte(s.body), s.query)
	}
	mds := requestDescriptors(f)
	f.Fuzz(func(t *testing.T, index uint, msg string, body []byte, rawQuery string) {
		md := pick(mds, index, msg)
		query, _ := url.ParseQuery(rawQuery) // keeps what parses, as net/http does
		out, err := mergeParams(md, body, query)
		checkMerged(t, md, out, err)
	})
}

// FuzzQueryArray feeds arbitrary query values to the repeated fields: JSON
// array text, comma lists and repeated keys.
func FuzzQueryArray(f *testing.F) {
	for _, s := range []struct{ msg, field, a, b string }{
		{"GetActorDetailsRequest", "details", `["items","spells"]`, ""},
		{"GetActorDetailsRequest", "details", "items,spells", ""},
		{"GetActorDetailsRequest", "details", "items", "spells"},
		{"GetActorDetailsRequest", "details", `[`, ""},
		{"GetActorDetailsRequest", "details", `[1, true, null, {"a":[]}]`, ""},
		{"GetActorDetailsRequest", "details", ` [ "x" ] trailing`, ""},
		{"GetActorDetailsRequest", "details", "", ""},
		{"", "", `[1.5, -2, 1e999]`, "3"},
		{"", "", `["\ud800"]`, ""},
	} {
		f.Add(s.msg, s.field, s.a, s.b)
	}
	mds := requestDescriptors(f)
	// Every repeated field of the contract, so an unnamed field still lands
	// on one.
	type listField struct {
		md protoreflect.MessageDescriptor
		fd protoreflect.FieldDescriptor
	}
	var lists []listField
	for _, md := range mds {
		fields := md.Fields()
		for i := range fields.Len() {
			if fd := fields.Get(i); fd.IsList() {
				lists = append(lists, listField{md, fd})
			}
		}
	}
	if len(lists) == 0 {
		f.Fatal("the contract has no repeated request field")
	}
	f.Fuzz(func(t *testing.T, msg, field, a, b string) {
		target := lists[(len(msg)+len(field)+len(a))%len(lists)]
		for _, l := range lists {
			if string(l.md.Name()) == msg && l.fd.JSONName() == field {
				target = l
			}
		}
		values := []string{a}
		if b != "" {
			values = append(values, b)
		}
		query := url.Values{target.fd.JSONName(): values}
		out, err := mergeParams(target.md, nil, query)
		checkMerged(t, target.md, out, err)
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(out, &obj)
		if raw, ok := obj[target.fd.JSONName()]; ok {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				t.Fatalf("%s = %s is not an array", target.fd.JSONName(), raw)
			}
		}
	})
}

// FuzzObjectMembers: where objectMembers splits a body, json.Unmarshal
// into a map of raw messages reads it, to the same members; where it
// declines, the body is anything but a plain JSON object.
func FuzzObjectMembers(f *testing.F) {
	for _, s := range []string{
		`{"uuid":"Actor.a","data":{"system.attributes.hp.value":12}}`,
		` { "a" : [1, {"b": "}"}, "\"]"] , "a": null, "c" : -1.5e3 , "d":true} `,
		`{}`, `[]`, `null`, `{"a\u0062":1}`, "{\"\xff\":1}", `{"a":"\\"}`, `{"a":{}}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := objectMembers(body)
		var want map[string]json.RawMessage
		err := json.Unmarshal(body, &want)
		if !ok {
			if err == nil && want != nil && json.Valid(body) && !strings.Contains(string(body), `\`) && utf8Keys(want) {
				t.Fatalf("%q: declined a plain object", body)
			}
			return
		}
		if err != nil || want == nil {
			t.Fatalf("%q: split into %v, json.Unmarshal: %v", body, got, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, json.Unmarshal %d", body, len(got), len(want))
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("%q: member %q is %q, json.Unmarshal %q", body, k, got[k], v)
			}
		}
	})
}

// utf8Keys reports whether every key is valid UTF-8 (json.Unmarshal
// replaces bad bytes, which objectMembers leaves to it).
func utf8Keys(m map[string]json.RawMessage) bool {
	for k := range m {
		if strings.ContainsRune(k, utf8.RuneError) {
			return false
		}
	}
	return true
}
