package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestRESTCallMetadata checks what a REST call hands the server besides
// its parameters: the API key, a deferred parameter error refused after
// authentication, and a `Grpc-Timeout` header, whose malformed value is
// answered 400 (it used to make the handler panic and the connection
// drop without an answer).
func TestRESTCallMetadata(t *testing.T) {
	r := relaytest.Start(t)
	get := func(key, timeout, query string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, r.Base+"/get?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		if timeout != "" {
			req.Header.Set("Grpc-Timeout", timeout)
		}
		resp, err := r.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	uuid := "uuid=" + relaytest.AriaUUID
	if code, body := get(r.AdminKey, "", uuid); code != http.StatusOK || !strings.Contains(body, `"type":"entity-result"`) {
		t.Errorf("plain get: %d %.200s", code, body)
	}
	if code, body := get("", "", uuid); code != http.StatusUnauthorized {
		t.Errorf("no key: %d %.200s", code, body)
	}
	if code, body := get(r.AdminKey, "10S", uuid); code != http.StatusOK {
		t.Errorf("a generous Grpc-Timeout: %d %.200s", code, body)
	}
	if code, body := get(r.AdminKey, "soon", uuid); code != http.StatusBadRequest || !strings.Contains(body, "grpc-timeout") {
		t.Errorf("a malformed Grpc-Timeout: %d %.200s", code, body)
	}
	// A parameter that cannot be read is refused after the key is checked.
	if code, body := get("", "", uuid+"&limited=maybe"); code != http.StatusUnauthorized {
		t.Errorf("bad parameter without a key: %d %.200s", code, body)
	}
	if code, body := get(r.AdminKey, "", uuid+"&userId=Alice&clientId=%5B"); code == http.StatusOK {
		t.Errorf("bad parameter with a key: %d %.200s", code, body)
	}
}
