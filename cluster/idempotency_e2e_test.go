package cluster_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// keyedIncrease adds amount to Brom's gold pieces in west through a node,
// with an Idempotency-Key, and returns the answer (status 0 when the node
// could not be reached).
func keyedIncrease(client *http.Client, base, apiKey, idemKey string, amount float64) relaytest.Response {
	body, _ := json.Marshal(map[string]any{"clientId": "west", "uuid": relaytest.BromUUID, "attribute": "system.currency.gp", "amount": amount})
	req, err := http.NewRequest(http.MethodPost, base+"/increase", bytes.NewReader(body))
	if err != nil {
		return relaytest.Response{}
	}
	req.Header.Set("x-api-key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := client.Do(req)
	if err != nil {
		return relaytest.Response{}
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: out}
}

// bromGold reads Brom's gold pieces in west through a node (ok false when
// the read failed).
func bromGold(t *testing.T, via *relaytest.Relay) (float64, bool) {
	t.Helper()
	got := via.Do(http.MethodGet, "/get", via.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.BromUUID), nil)
	if got.Status != http.StatusOK {
		return 0, false
	}
	var env struct {
		Data struct {
			System struct {
				Currency struct {
					GP float64 `json:"gp"`
				} `json:"currency"`
			} `json:"system"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got.Body, &env); err != nil {
		t.Fatal(err)
	}
	return env.Data.System.Currency.GP, true
}

// TestIdempotentRetryAcrossAFailover checks that a write's idempotency key
// travels with the world: a write sent with a key through one node is
// applied on the host; a retry through another node gets the first
// answer; and after the host dies and a follower takes the world over, a
// retry through any node still gets the first answer, body and all, and
// the write stays applied once, while the key reused for another request
// is still refused.
func TestIdempotentRetryAcrossAFailover(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}

	writeFirst(t, client, n1, cfgs)
	gold, ok := bromGold(t, n1)
	if !ok {
		t.Fatal("read Brom's gold")
	}

	// Through n1 to the host n2; again through n3.
	first := keyedIncrease(client, n1.Base, n1.AdminKey, "failover-1", 5)
	if first.Status != http.StatusOK {
		t.Fatalf("keyed write: %d %s", first.Status, first.Body)
	}
	again := keyedIncrease(client, n3.Base, n3.AdminKey, "failover-1", 5)
	if again.Status != http.StatusOK || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replay") == "" {
		t.Fatalf("retry through another node: %d %s (replay %q); first %s", again.Status, again.Body, again.Header.Get("Idempotent-Replay"), first.Body)
	}

	// An upload (a client stream, forwarded to the host) with a key: the
	// retry through another node, which without the key would be refused
	// since the file exists, gets the first answer.
	upload := func(via *relaytest.Relay) relaytest.Response {
		body, _ := json.Marshal(map[string]any{"clientId": "west", "path": "idem", "filename": "a.txt", "fileData": base64.StdEncoding.EncodeToString([]byte("hello"))})
		req, _ := http.NewRequest(http.MethodPost, via.Base+"/upload", bytes.NewReader(body))
		req.Header.Set("x-api-key", via.AdminKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "upload-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: out}
	}
	up := upload(n1)
	if up.Status != http.StatusOK {
		t.Fatalf("keyed upload: %d %s", up.Status, up.Body)
	}
	if again := upload(n3); again.Status != http.StatusOK || !bytes.Equal(again.Body, up.Body) || again.Header.Get("Idempotent-Replay") == "" {
		t.Fatalf("retried upload through another node: %d %s (replay %q); first %s", again.Status, again.Body, again.Header.Get("Idempotent-Replay"), up.Body)
	}

	died := time.Now()
	n2.Cluster().Crash()

	// A retry through n1 (n3 below) gets the first answer once a follower
	// serves the world; until then it may be refused as unavailable.
	for _, via := range []*relaytest.Relay{n1, n3} {
		var retry relaytest.Response
		waitFor(t, 45*time.Second, "a retry answered after the failover", func() bool {
			retry = keyedIncrease(client, via.Base, via.AdminKey, "failover-1", 5)
			return retry.Status != http.StatusServiceUnavailable && retry.Status != http.StatusGatewayTimeout && retry.Status != 0
		})
		if retry.Status != http.StatusOK || !bytes.Equal(retry.Body, first.Body) {
			t.Fatalf("retry after the failover: %d %s; first %d %s", retry.Status, retry.Body, first.Status, first.Body)
		}
	}
	t.Logf("the retry got the first answer %v after the host died", time.Since(died).Round(time.Millisecond))
	if r := keyedIncrease(client, n3.Base, n3.AdminKey, "failover-1", 6); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "different request") {
		t.Fatalf("the key reused for another request after the failover: %d %s", r.Status, r.Body)
	}
	got, ok := bromGold(t, n3)
	if !ok || got != gold+5 {
		t.Fatalf("Brom's gold after one keyed write sent four times and a failover: %v (read %v), want %v", got, ok, gold+5)
	}
	// A new key is a new write, on the new host.
	if r := keyedIncrease(client, n1.Base, n1.AdminKey, "failover-2", 1); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replay") != "" {
		t.Fatalf("a new key after the failover: %d %s", r.Status, r.Body)
	}
	if got, _ := bromGold(t, n1); got != gold+6 {
		t.Fatalf("Brom's gold after a new keyed write: %v, want %v", got, gold+6)
	}
}
