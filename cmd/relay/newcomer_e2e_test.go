package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// bearerHint is what a caller who sent its key as a bearer token is told.
const bearerHint = "API key is required: send it in the x-api-key header; the relay does not read Authorization: Bearer"

// TestBearerTokenIsToldWhichHeader: a request that carries its key in
// `Authorization: Bearer` and no x-api-key is refused with 401 (gRPC
// UNAUTHENTICATED) that names the header to use, on every transport: REST,
// an SSE stream, GET /cluster, the approval of a key request, gRPC on its
// own transport, and gRPC on an h2c connection that began with REST. A request with no credentials at all
// keeps the plain message, and a key in x-api-key still works beside an
// Authorization header.
func TestBearerTokenIsToldWhichHeader(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	bearer := "Bearer " + tr.AdminKey

	get := func(t *testing.T, path, authorization, apiKey string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, tr.Base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		if apiKey != "" {
			req.Header.Set("x-api-key", apiKey)
		}
		resp, err := tr.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/get?uuid=" + relaytest.AriaUUID, "/actor/subscribe", "/cluster", "/keys"} {
		t.Run("REST "+path, func(t *testing.T) {
			if code, body := get(t, path, bearer, ""); code != http.StatusUnauthorized || !strings.Contains(body, bearerHint) {
				t.Fatalf("bearer token: %d %s", code, body)
			}
			if code, body := get(t, path, "bearer "+tr.AdminKey, ""); code != http.StatusUnauthorized || !strings.Contains(body, bearerHint) {
				t.Fatalf("bearer token, scheme in lower case: %d %s", code, body)
			}
			if code, body := get(t, path, "", ""); code != http.StatusUnauthorized || strings.Contains(body, "Bearer") || !strings.Contains(body, "API key is required") {
				t.Fatalf("no credentials: %d %s", code, body)
			}
		})
	}
	// The approval endpoints of key requests check their key themselves.
	t.Run("key request approval", func(t *testing.T) {
		code := openKeyRequest(t, tr.Relay, map[string]any{"appName": "Tool", "scopes": []string{"entity:read"}})["code"].(string)
		for _, path := range []string{"/auth/key-request/" + code} {
			if status, body := get(t, path, bearer, ""); status != http.StatusUnauthorized || !strings.Contains(body, bearerHint) {
				t.Fatalf("GET %s with a bearer token: %d %s", path, status, body)
			}
		}
		req, err := http.NewRequest(http.MethodPost, tr.Base+"/auth/key-request/"+code+"/approve", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", bearer)
		resp, err := tr.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), bearerHint) {
			t.Fatalf("approve with a bearer token: %d %s", resp.StatusCode, body)
		}
		if s := tr.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
			t.Fatalf("status after a refused approval: %s", s.Body)
		}
	})
	if code, body := get(t, "/get?uuid="+relaytest.AriaUUID, bearer, tr.AdminKey); code != http.StatusOK {
		t.Fatalf("x-api-key beside a bearer token: %d %s", code, body)
	}

	t.Run("gRPC", func(t *testing.T) {
		docs := relayv1.NewDocumentServiceClient(tr.Conn)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", bearer)
		_, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID})
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != bearerHint {
			t.Fatalf("bearer token over gRPC: %v", err)
		}
		stream, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != bearerHint {
			t.Fatalf("bearer token on a gRPC event stream: %v", err)
		}
	})

	t.Run("gRPC after REST on one h2c connection", func(t *testing.T) {
		client := h2cClient()
		defer client.CloseIdleConnections()
		resp, err := client.Get(tr.Base + "/healthz")
		if err != nil || resp.ProtoMajor != 2 {
			t.Fatalf("h2c healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		data, err := proto.Marshal(&relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID})
		if err != nil {
			t.Fatal(err)
		}
		body := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(data))), data...)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.Base+"/relay.v1.DocumentService/GetDocument", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Authorization", bearer)
		resp, err = client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fields := resp.Trailer
		if resp.Header.Get("Grpc-Status") != "" {
			fields = resp.Header
		}
		if fields.Get("Grpc-Status") != "16" || !strings.Contains(fields.Get("Grpc-Message"), "x-api-key") {
			t.Fatalf("bearer token over gRPC after REST: status %q message %q", fields.Get("Grpc-Status"), fields.Get("Grpc-Message"))
		}
	})
}

// TestGroupCommandsAnswerHelp: `relay keys --help` and its kin print their
// commands on standard output and succeed, as `relay --help` does; no
// command or an unknown one is still a usage error that shows them.
func TestGroupCommandsAnswerHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		group string
		want  []string
	}{
		{"keys", []string{"relay keys create", "relay keys list", "relay keys revoke"}},
		{"worlds", []string{"relay worlds list", "relay worlds pair-code", "relay worlds unpair"}},
		{"cluster", []string{"relay cluster status"}},
	} {
		for _, arg := range []string{"--help", "-h", "help"} {
			out, errOut, err := cli(t, c.group, arg)
			if err != nil || errOut != "" {
				t.Fatalf("relay %s %s: %v, stderr %q", c.group, arg, err, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("relay %s %s printed %q, lacking %q", c.group, arg, out, w)
				}
			}
		}
		out, errOut, err := cli(t, c.group, "frobnicate")
		var uerr usageError
		if !errors.As(err, &uerr) || out != "" || !strings.Contains(errOut+err.Error(), c.want[0]) {
			t.Errorf("relay %s frobnicate: %v, stdout %q, stderr %q", c.group, err, out, errOut)
		}
	}
	// A command's own help is still flag.ErrHelp, which main prints
	// as help and exits 0 for.
	if _, errOut, err := cli(t, "keys", "create", "--help"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut, "--name") && !strings.Contains(errOut, "-name") {
		t.Fatalf("relay keys create --help: %v %q", err, errOut)
	}
}
