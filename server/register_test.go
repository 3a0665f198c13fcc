package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
)

// recordingRegistrar keeps the names of the services registered with it.
type recordingRegistrar struct{ names []string }

func (r *recordingRegistrar) RegisterService(desc *grpc.ServiceDesc, _ any) {
	r.names = append(r.names, desc.ServiceName)
}

// TestRegisterServicesByInterface: every service of the contract is
// registered with the implementation of its generated interface; a
// missing, surplus or doubled implementation is an error that names it.
func TestRegisterServicesByInterface(t *testing.T) {
	t.Parallel()
	impls := func() []any {
		return []any{
			documentService{}, folderService{}, canvasService{}, scriptService{}, keyService{}, accountService{}, worldService{}, auditService{}, clientService{},
			linkService{}, &eventService{}, ticketService{}, &combatService{}, &fileService{}, &dnd5eService{}, signinService{},
		}
	}
	var reg recordingRegistrar
	if err := registerServices(&reg, impls()); err != nil {
		t.Fatal(err)
	}
	if len(reg.names) != len(impls()) {
		t.Fatalf("registered %v", reg.names)
	}
	for _, tc := range []struct {
		name  string
		impls []any
		want  string
	}{
		{"missing", impls()[1:], "no implementation of relay.v1.DocumentService"},
		{"surplus", append(impls(), struct{}{}), "struct {} implements no service"},
		{"doubled", append(impls(), documentService{}), "both implement relay.v1.DocumentService"},
	} {
		err := registerServices(&recordingRegistrar{}, tc.impls)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
