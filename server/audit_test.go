package server

import (
	"testing"

	"google.golang.org/grpc"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// TestEveryAdministrativeMethodIsAudited holds the table of audited
// methods to every method of the account, key and link services, so that
// a method added to them is recorded in the audit log from the start.
func TestEveryAdministrativeMethodIsAudited(t *testing.T) {
	t.Parallel()
	for _, svc := range []*grpc.ServiceDesc{&relayv1.AccountService_ServiceDesc, &relayv1.KeyService_ServiceDesc, &relayv1.LinkService_ServiceDesc} {
		for _, m := range svc.Methods {
			full := "/" + svc.ServiceName + "/" + m.MethodName
			if _, ok := auditedMethods[full]; !ok {
				t.Errorf("%s is not audited", full)
			}
		}
	}
}
