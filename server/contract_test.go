package server

import (
	"net/http"
	"sort"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
)

// TestEveryRPCDeclaresRouteAndPolicy walks the contract: every RPC must have
// an HTTP rule (or be marked gRPC-only) and a complete policy, and every
// world-scoped request must carry clientId and userId, which the world and
// user resolution read.
func TestEveryRPCDeclaresRouteAndPolicy(t *testing.T) {
	t.Parallel()
	services, err := ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	operations := map[string]string{}
	for _, sd := range services {
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			name := string(md.FullName())
			p := MethodPolicy(md)
			if p == nil {
				t.Errorf("%s: no policy (operation and scope are required)", name)
				continue
			}
			if !keys.ValidScope(p.GetScope()) {
				t.Errorf("%s: unknown scope %q", name, p.GetScope())
			}
			if other, dup := operations[p.GetOperation()]; dup {
				t.Errorf("%s: operation %q already used by %s", name, p.GetOperation(), other)
			}
			operations[p.GetOperation()] = name
			if p.GetGmOnly() != (p.GetGmAction() != "") {
				t.Errorf("%s: gm_only and gm_action go together", name)
			}
			if (p.GetWorldPermission() == "") != (p.GetPermissionAction() == "") {
				t.Errorf("%s: world_permission and permission_action go together", name)
			}
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule == nil && !p.GetGrpcOnly() {
				t.Errorf("%s: no HTTP rule and not marked grpc_only", name)
			}
			if !p.GetWorldless() {
				for _, field := range []protoreflect.Name{"client_id", "user_id"} {
					fd := md.Input().Fields().ByName(field)
					if fd == nil || fd.Kind() != protoreflect.StringKind {
						t.Errorf("%s: world-scoped request lacks string field %s", name, field)
					}
				}
			}
		}
	}
}

// TestDocumentedPaths pins the REST paths of the specification and of the
// established endpoints, so a renamed route fails here.
func TestDocumentedPaths(t *testing.T) {
	t.Parallel()
	want := []string{
		"DELETE /delete", "DELETE /delete-folder", "DELETE /keys/{id}", "DELETE /linked-worlds/{client_id}",
		"GET /actor/subscribe", "GET /clients", "GET /dnd5e/concentration", "GET /dnd5e/get-actor-details",
		"GET /download", "GET /encounters", "GET /encounters/subscribe", "GET /file-system", "GET /get",
		"GET /hooks/subscribe", "GET /keys", "GET /scene/subscribe", "GET /search", "GET /selected", "GET /structure",
		"POST /add-to-encounter", "POST /create", "POST /create-folder", "POST /decrease",
		"POST /dnd5e/ability-check", "POST /dnd5e/ability-save", "POST /dnd5e/attune-item",
		"POST /dnd5e/break-concentration", "POST /dnd5e/concentration-save", "POST /dnd5e/death-save",
		"POST /dnd5e/equip-item", "POST /dnd5e/long-rest", "POST /dnd5e/modify-currency",
		"POST /dnd5e/modify-experience", "POST /dnd5e/modify-item-charges", "POST /dnd5e/prepare-spell",
		"POST /dnd5e/short-rest", "POST /dnd5e/skill-check", "POST /dnd5e/transfer-currency",
		"POST /dnd5e/use-ability", "POST /dnd5e/use-feature", "POST /dnd5e/use-item", "POST /dnd5e/use-spell",
		"POST /end-encounter", "POST /execute-js", "POST /give", "POST /increase", "POST /keys", "POST /kill", "POST /pairing-codes",
		"POST /last-round", "POST /last-turn", "POST /next-round", "POST /next-turn", "POST /previous-round",
		"POST /previous-turn", "POST /remove", "POST /remove-from-encounter", "POST /select",
		"POST /start-encounter", "POST /stream-tickets", "POST /upload", "PUT /update",
		"POST /accounts", "GET /accounts", "GET /accounts/{id}", "PATCH /accounts/{id}",
		"POST /accounts/{id}/suspend", "POST /accounts/{id}/resume", "DELETE /accounts/{id}", "GET /audit",
		"POST /worlds", "DELETE /worlds/{client_id}", "POST /account/password", "POST /invites", "GET /invites", "DELETE /invites/{id}",
	}
	services, err := ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			rule, _ := proto.GetExtension(sd.Methods().Get(i).Options(), annotations.E_Http).(*annotations.HttpRule)
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				switch p := r.GetPattern().(type) {
				case *annotations.HttpRule_Get:
					got = append(got, http.MethodGet+" "+p.Get)
				case *annotations.HttpRule_Post:
					got = append(got, http.MethodPost+" "+p.Post)
				case *annotations.HttpRule_Put:
					got = append(got, http.MethodPut+" "+p.Put)
				case *annotations.HttpRule_Delete:
					got = append(got, http.MethodDelete+" "+p.Delete)
				case *annotations.HttpRule_Patch:
					got = append(got, http.MethodPatch+" "+p.Patch)
				}
			}
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("routes:\n got %v\nwant %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("route %d: got %q, want %q\n got %v", i, got[i], want[i], got)
		}
	}
}

// TestResponsesPrintEveryField: protojson omits unset proto3 `optional`
// scalars even when asked to emit unpopulated fields, so a response (or any
// message inside one) must use wrapper messages for nullable values.
func TestResponsesPrintEveryField(t *testing.T) {
	t.Parallel()
	services, err := ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[protoreflect.FullName]bool{}
	var check func(md protoreflect.MessageDescriptor)
	check = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || md.ParentFile().Package() != "relay.v1" {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.HasOptionalKeyword() {
				t.Errorf("%s: optional field in a response; use a wrapper message", fd.FullName())
			}
			if fd.Message() != nil {
				check(fd.Message())
			}
		}
	}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			check(sd.Methods().Get(i).Output())
		}
	}
}

// TestRawJSONFields: the raw_json option only marks singular
// google.protobuf.Value fields (the JSON values the services fill with raw
// Values, see package jsonvalue), at every depth of the messages, and a
// rule's response_body names a raw_json field or a message, the two shapes
// the gateway's envelope knows how to write.
func TestRawJSONFields(t *testing.T) {
	t.Parallel()
	services, err := ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	isRaw := func(fd protoreflect.FieldDescriptor) bool {
		raw, _ := proto.GetExtension(fd.Options(), relayv1.E_RawJson).(bool)
		return raw
	}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			seen := map[protoreflect.FullName]bool{}
			var check func(msg protoreflect.MessageDescriptor)
			check = func(msg protoreflect.MessageDescriptor) {
				if seen[msg.FullName()] || msg.ParentFile().Package() != "relay.v1" {
					return
				}
				seen[msg.FullName()] = true
				fields := msg.Fields()
				for j := range fields.Len() {
					fd := fields.Get(j)
					if isRaw(fd) && (fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Value" || fd.IsList() || fd.IsMap()) {
						t.Errorf("%s: raw_json on a field that is not a singular google.protobuf.Value", fd.FullName())
					}
					if fd.Message() != nil {
						check(fd.Message())
					}
				}
			}
			check(md.Input())
			check(md.Output())
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if body := rule.GetResponseBody(); body != "" {
				fd := md.Output().Fields().ByName(protoreflect.Name(body))
				if fd == nil || !(isRaw(fd) || fd.Message() != nil) {
					t.Errorf("%s: response_body %q must name a raw_json or message field", md.FullName(), body)
				}
			}
		}
	}
}

// TestResponsesCarryJSONAsValues: no response message holds a
// google.protobuf.Struct or ListValue field, at any depth. JSON reaches
// callers in Value fields only, which the gRPC codec transcodes from the
// relay's raw form (package jsonvalue); a raw Struct in a response would
// reach a gRPC caller empty.
func TestResponsesCarryJSONAsValues(t *testing.T) {
	t.Parallel()
	services, err := ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[protoreflect.FullName]bool{}
	var check func(md protoreflect.MessageDescriptor)
	check = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || md.ParentFile().Package() != "relay.v1" {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			sub := fd.Message()
			if sub == nil {
				continue
			}
			if name := sub.FullName(); name == "google.protobuf.Struct" || name == "google.protobuf.ListValue" {
				t.Errorf("%s is a %s in a response; use google.protobuf.Value", fd.FullName(), name)
			}
			if fd.IsMap() {
				sub = fd.MapValue().Message()
				if sub == nil {
					continue
				}
			}
			check(sub)
		}
	}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			check(sd.Methods().Get(i).Output())
		}
	}
	if len(seen) < 50 {
		t.Fatalf("only %d response messages found", len(seen))
	}
}
