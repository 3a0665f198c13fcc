package contract

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestServicesAreTheContract: Services lists every service of the relay.v1
// package, once, and each entry's gRPC description matches the service's
// descriptor method for method.
func TestServicesAreTheContract(t *testing.T) {
	var generated []string
	protoregistry.GlobalFiles.RangeFilesByPackage("relay.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			generated = append(generated, string(fd.Services().Get(i).FullName()))
		}
		return true
	})
	var listed []string
	for _, s := range Services {
		listed = append(listed, s.ServiceName)
	}
	slices.Sort(generated)
	sorted := slices.Sorted(slices.Values(listed))
	if !slices.Equal(generated, sorted) {
		t.Fatalf("the proto package has services %v; contract.Services lists %v", generated, listed)
	}
	descriptors, err := Descriptors()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range Services {
		sd := descriptors[i]
		if string(sd.FullName()) != s.ServiceName {
			t.Fatalf("descriptor %d is %s, want %s", i, sd.FullName(), s.ServiceName)
		}
		var methods []string
		for _, m := range s.Methods {
			methods = append(methods, m.MethodName)
		}
		for _, st := range s.Streams {
			methods = append(methods, st.StreamName)
			md := sd.Methods().ByName(protoreflect.Name(st.StreamName))
			if md == nil || md.IsStreamingClient() != st.ClientStreams || md.IsStreamingServer() != st.ServerStreams {
				t.Errorf("%s/%s: the description's streaming does not match the descriptor", s.ServiceName, st.StreamName)
			}
		}
		if len(methods) != sd.Methods().Len() {
			t.Errorf("%s: %d methods described, %d declared", s.ServiceName, len(methods), sd.Methods().Len())
		}
		for _, m := range methods {
			if sd.Methods().ByName(protoreflect.Name(m)) == nil {
				t.Errorf("%s: %s is described but not declared", s.ServiceName, m)
			}
		}
		for j := range sd.Methods().Len() {
			if md := sd.Methods().Get(j); FullMethodName(md) != "/"+s.ServiceName+"/"+string(md.Name()) {
				t.Errorf("FullMethodName(%s) = %s", md.FullName(), FullMethodName(md))
			}
		}
	}
}
