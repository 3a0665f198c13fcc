package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// TestAccountsBadInputEverywhere sends the accounts API every kind of bad
// input, over REST and gRPC: names empty, blank, too long, with control
// characters or taken (ignoring case), quotas that are not whole numbers in
// range, missing and unknown ids, and unknown scopes for the keys and key
// requests of an account. Each is refused with the right status naming
// the parameter at fault, and afterwards every account, key and key
// request is as it was.
func TestAccountsBadInputEverywhere(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	id, gmKey := createAccount(t, tr, "Guild")
	createAccount(t, tr, "Other")
	svc := relayv1.NewAccountServiceClient(tr.Conn)
	asKey := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	}

	// What must not change: every account as the operator sees it, and
	// the keys of the game master's account.
	accounts := func() string {
		t.Helper()
		r := tr.Do(http.MethodGet, "/accounts", admin, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /accounts = %d %s", r.Status, r.Body)
		}
		out, _ := json.Marshal(r.Data(t)["accounts"])
		return string(out)
	}
	gmKeys := func() string {
		t.Helper()
		r := tr.Do(http.MethodGet, "/keys", gmKey, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /keys = %d %s", r.Status, r.Body)
		}
		out, _ := json.Marshal(r.Data(t)["keys"])
		return string(out)
	}
	beforeAccounts, beforeKeys := accounts(), gmKeys()

	long := strings.Repeat("n", 65)
	for _, tc := range []struct {
		method, path string
		body         string
		status       int
		want         string
	}{
		{"POST", "/accounts", `{}`, 400, "'name' is required"},
		{"POST", "/accounts", `{"name":"  "}`, 400, "'name' is required"},
		{"POST", "/accounts", `{"name":"` + long + `"}`, 400, "'name' is longer than 64 characters"},
		{"POST", "/accounts", `{"name":"a\u0007b"}`, 400, "'name' contains control characters"},
		{"POST", "/accounts", `{"name":123}`, 400, "'name' must be a string"},
		{"POST", "/accounts", `{"name":" GUILD "}`, 409, `Account name is taken: "GUILD"`},
		{"POST", "/accounts", `{"name":"operator"}`, 409, `Account name is taken: "operator"`},
		{"POST", "/accounts", `{"name":"x","quotas":{"keys":"many"}}`, 400, "'quotas.keys' must be a number"},
		{"POST", "/accounts", `{"name":"x","quotas":{"worlds":true}}`, 400, "'quotas.worlds' must be a number"},
		{"POST", "/accounts", `{"name":"x","quotas":{"streams":1.5}}`, 400, "'quotas.streams' must be a whole number"},
		{"POST", "/accounts", `{"name":"x","quotas":{"requestsPerMinute":1e12}}`, 400, "'quotas.requestsPerMinute' is out of range"},
		{"POST", "/accounts", `{"name":"x","quotas":{"keys":-1}}`, 400, "'quotas.keys' must be a number from 0"},
		{"POST", "/accounts", `{"name":"x","quotas":"lots"}`, 400, "'quotas' must be a JSON object"},
		{"POST", "/accounts", `{"name":"x","quotas":{"key":5}}`, 400, "'quotas.key' is not one of its members (worlds, keys, streams, requestsPerMinute"},
		{"POST", "/accounts", `not json`, 400, "The request body must be a JSON object"},
		{"PATCH", "/accounts/" + id, `{"name":"` + long + `"}`, 400, "'name' is longer than 64 characters"},
		{"PATCH", "/accounts/" + id, `{"name":"   "}`, 400, "'name' is required"},
		{"PATCH", "/accounts/" + id, `{"name":"a\u0000b"}`, 400, "'name' contains control characters"},
		{"PATCH", "/accounts/" + id, `{"name":"OTHER"}`, 409, `Account name is taken: "OTHER"`},
		{"PATCH", "/accounts/" + id, `{"name":"Operator"}`, 409, `Account name is taken: "Operator"`},
		{"PATCH", "/accounts/" + id, `{"quotas":{"keys":"many"}}`, 400, "'quotas.keys' must be a number"},
		{"PATCH", "/accounts/" + id, `{"quotas":{"keys":2.5}}`, 400, "'quotas.keys' must be a whole number"},
		{"PATCH", "/accounts/" + id, `{"quotas":{"keys":99999999999}}`, 400, "'quotas.keys' is out of range"},
		{"PATCH", "/accounts/" + id, `{"quotas":{"worlds":-3}}`, 400, "'quotas.worlds' must be a number from 0"},
		{"PATCH", "/accounts/" + id, `{"quotas":[1]}`, 400, "'quotas' must be a JSON object"},
		{"PATCH", "/accounts/" + id, `{"quotas":{"requestsPerMinute":5,"requestsPerHour":60}}`, 400, "'quotas.requestsPerHour' is not one of its members"},
		{"PATCH", "/accounts/operator", `{"name":"boss"}`, 400, "The operator's account cannot be changed that way"},
		{"PATCH", "/accounts/acc_0000000000000000", `{"name":"boss"}`, 404, "Account not found: acc_0000000000000000"},
		{"GET", "/accounts/acc_0000000000000000", ``, 404, "Account not found: acc_0000000000000000"},
		{"POST", "/accounts/acc_0000000000000000/suspend", ``, 404, "Account not found: acc_0000000000000000"},
		{"POST", "/accounts/acc_0000000000000000/resume", ``, 404, "Account not found: acc_0000000000000000"},
		{"DELETE", "/accounts/acc_0000000000000000", ``, 404, "Account not found: acc_0000000000000000"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := tr.Do(tc.method, tc.path, admin, nil, body)
		if r.Status != tc.status || !strings.Contains(r.ErrorText(t), tc.want) {
			t.Errorf("%s %s %s = %d %s, want %d with %q", tc.method, tc.path, tc.body, r.Status, r.Body, tc.status, tc.want)
		}
	}

	// The same over gRPC, where quotas are numbers by type: a negative or
	// absurd one is named with its path, as over REST.
	ctx := asKey(admin)
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"empty name", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{})
			return err
		}, codes.InvalidArgument, "'name' is required"},
		{"long name", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: long})
			return err
		}, codes.InvalidArgument, "'name' is longer than 64 characters"},
		{"control characters", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: "a\tb"})
			return err
		}, codes.InvalidArgument, "'name' contains control characters"},
		{"taken name", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: "guild"})
			return err
		}, codes.AlreadyExists, `Account name is taken: "guild"`},
		{"negative keys", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: "x", Quotas: &relayv1.AccountQuotas{Keys: -1}})
			return err
		}, codes.InvalidArgument, "'quotas.keys' must be a number from 0"},
		{"negative worlds", func() error {
			_, err := svc.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: "x", Quotas: &relayv1.AccountQuotas{Worlds: -1}})
			return err
		}, codes.InvalidArgument, "'quotas.worlds' must be a number from 0"},
		{"negative streams", func() error {
			_, err := svc.UpdateAccount(ctx, &relayv1.UpdateAccountRequest{Id: id, Quotas: &relayv1.AccountQuotas{Streams: -1}})
			return err
		}, codes.InvalidArgument, "'quotas.streams' must be a number from 0"},
		{"negative requests a minute", func() error {
			_, err := svc.UpdateAccount(ctx, &relayv1.UpdateAccountRequest{Id: id, Quotas: &relayv1.AccountQuotas{RequestsPerMinute: -5}})
			return err
		}, codes.InvalidArgument, "'quotas.requestsPerMinute' must be a number from 0"},
		{"rename to a taken name", func() error {
			_, err := svc.UpdateAccount(ctx, &relayv1.UpdateAccountRequest{Id: id, Name: "Other"})
			return err
		}, codes.AlreadyExists, `Account name is taken: "Other"`},
		{"rename too long", func() error {
			_, err := svc.UpdateAccount(ctx, &relayv1.UpdateAccountRequest{Id: id, Name: long})
			return err
		}, codes.InvalidArgument, "'name' is longer than 64 characters"},
		{"update without id", func() error {
			_, err := svc.UpdateAccount(ctx, &relayv1.UpdateAccountRequest{Name: "y"})
			return err
		}, codes.InvalidArgument, "'id' is required"},
		{"get without id", func() error {
			_, err := svc.GetAccount(ctx, &relayv1.GetAccountRequest{})
			return err
		}, codes.InvalidArgument, "'id' is required"},
		{"suspend without id", func() error {
			_, err := svc.SuspendAccount(ctx, &relayv1.SuspendAccountRequest{})
			return err
		}, codes.InvalidArgument, "'id' is required"},
		{"resume without id", func() error {
			_, err := svc.ResumeAccount(ctx, &relayv1.ResumeAccountRequest{})
			return err
		}, codes.InvalidArgument, "'id' is required"},
		{"delete without id", func() error {
			_, err := svc.DeleteAccount(ctx, &relayv1.DeleteAccountRequest{})
			return err
		}, codes.InvalidArgument, "'id' is required"},
		{"unknown id", func() error {
			_, err := svc.DeleteAccount(ctx, &relayv1.DeleteAccountRequest{Id: "acc_0000000000000000"})
			return err
		}, codes.NotFound, "Account not found: acc_0000000000000000"},
		{"unknown scope for an account's key", func() error {
			_, err := relayv1.NewKeyServiceClient(tr.Conn).CreateKey(asKey(gmKey), &relayv1.CreateKeyRequest{Name: "bot", Scopes: []string{"entity:read", "telepathy"}})
			return err
		}, codes.InvalidArgument, `unknown scope "telepathy"`},
	} {
		err := tc.call()
		if st := status.Convert(err); err == nil || st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("gRPC, %s: %v, want %s with %q", tc.name, err, tc.code, tc.want)
		}
	}

	// Unknown scopes for the account's keys and key requests over REST.
	if r := tr.Do(http.MethodPost, "/keys", gmKey, nil, `{"name":"bot","scopes":["entity:read","telepathy"]}`); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), `unknown scope "telepathy"`) {
		t.Errorf("POST /keys with an unknown scope = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/auth/key-request", "", nil, `{"appName":"bot","scopes":["telepathy"]}`); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "Invalid scope: telepathy") {
		t.Errorf("a key request with an unknown scope = %d %s", r.Status, r.Body)
	}
	r := tr.Do(http.MethodPost, "/auth/key-request", "", nil, `{"appName":"bot","scopes":["entity:read"]}`)
	code, _ := r.JSON(t)["code"].(string)
	if r.Status != http.StatusCreated || code == "" {
		t.Fatalf("a key request = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/auth/key-request/"+code+"/approve", gmKey, nil, `{"scopes":["telepathy"]}`); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "telepathy") {
		t.Errorf("approving with an unknown scope = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/auth/key-request/"+code+"/status", "", nil, nil); r.Status != http.StatusOK || r.JSON(t)["status"] != "pending" {
		t.Errorf("the key request after a refused approval = %d %s, want it pending", r.Status, r.Body)
	}

	if after := accounts(); after != beforeAccounts {
		t.Errorf("bad input changed the accounts:\nbefore %s\nafter  %s", beforeAccounts, after)
	}
	if after := gmKeys(); after != beforeKeys {
		t.Errorf("bad input changed the account's keys:\nbefore %s\nafter  %s", beforeKeys, after)
	}
}
