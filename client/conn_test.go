package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabletop-relay/relay/client"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// TestDialOptionsAndSharedConn: dial options reach the connection the
// client dials, and a client on a connection of the caller's sends its own
// key on it and leaves it open when closed.
func TestDialOptionsAndSharedConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dialled := newClient(t, client.WithAPIKey(adminKey), client.WithWorld("demo"),
		client.WithDialOptions(grpc.WithUserAgent("relay-client-test")))
	if _, err := dialled.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID}); err != nil {
		t.Fatalf("a client with dial options: %v", err)
	}

	conn, err := grpc.NewClient(relayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	shared, err := client.New("ignored:0", client.WithConn(conn), client.WithAPIKey(adminKey), client.WithWorld("demo"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID}); err != nil {
		t.Fatalf("a client on a shared connection: %v", err)
	}
	shared.Close()
	if conn.GetState() == connectivity.Shutdown {
		t.Fatal("closing the client closed the caller's connection")
	}
	// The connection itself carries no key: a call without the client's
	// wrapper is refused.
	if _, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID}); err == nil {
		t.Fatal("the shared connection sent a key of its own")
	}
}
