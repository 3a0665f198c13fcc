package cluster_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// TestRogueClientCannotActForCallers: in a cluster with a secret, a plain
// NATS client inside the nodes' account (here one that holds the embedded
// server's token) sees a forwarded call go by, and cannot get a node to
// act on it again, on a changed copy, or on a call of its own: on the
// subjects of forwarded calls, downloads, uploads and questions about a
// world's users, every node answers only calls signed by a node that knows
// the secret, once each. The real calls keep working.
func TestRogueClientCannotActForCallers(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("7e1a", 16)
	nodes, _ := startCluster(t, func(c *node.Config) { c.Cluster.ClusterSecret = secret })
	n1 := nodes[0]
	rogue, err := n1.Cluster().Intruder()
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	// west is hosted by n2: a read of it through n1 is forwarded, and the
	// rogue sees the call.
	sniff, err := rogue.SubscribeSync("relay.node.n2.call")
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	get := func() relaytest.Response {
		return n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
	}
	if got := get(); got.Status != http.StatusOK {
		t.Fatalf("a forwarded read: %d %s", got.Status, got.Body)
	}
	seen, err := sniff.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the rogue saw no forwarded call: %v", err)
	}
	if seen.Header.Get("Relay-Signature") == "" {
		t.Fatalf("a forwarded call went unsigned: %v", seen.Header)
	}
	_ = sniff.Unsubscribe()

	// copyOf is the seen call on subject, with edit applied to its headers.
	copyOf := func(subject string, edit func(nats.Header)) *nats.Msg {
		m := nats.NewMsg(subject)
		for k, v := range seen.Header {
			m.Header[k] = append([]string(nil), v...)
		}
		m.Data = seen.Data
		if edit != nil {
			edit(m.Header)
		}
		return m
	}
	unsigned := func(h nats.Header) {
		for _, k := range []string{"Relay-Signature", "Relay-Signed-At", "Relay-Nonce"} {
			h.Del(k)
		}
	}
	refused := func(what string, m *nats.Msg) {
		t.Helper()
		res, err := rogue.RequestMsg(m, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, err := base64.StdEncoding.DecodeString(res.Header.Get("Relay-Status"))
		var st spb.Status
		if err != nil || proto.Unmarshal(b, &st) != nil || codes.Code(st.GetCode()) != codes.Unauthenticated || !strings.Contains(st.GetMessage(), "only the nodes of the cluster") {
			t.Fatalf("%s: answered %q %v, want Unauthenticated", what, res.Data, res.Header)
		}
	}
	refused("the call replayed as seen", copyOf("relay.node.n2.call", nil))
	refused("the call without its signature", copyOf("relay.node.n2.call", unsigned))
	refused("the call with another caller's key", copyOf("relay.node.n2.call", func(h nats.Header) {
		h.Set("Relay-Key", strings.Replace(h.Get("Relay-Key"), `"`, `" `, 1))
		h.Set("Relay-Nonce", "fresh")
	}))
	refused("the call signed with a date moved on", copyOf("relay.node.n2.call", func(h nats.Header) {
		h.Set("Relay-Signed-At", "1")
	}))
	// The same call as a download or an upload, unsigned.
	for _, subject := range []string{"relay.node.n2.stream", "relay.node.n2.upload"} {
		refused("an unsigned call on "+subject, copyOf(subject, func(h nats.Header) {
			unsigned(h)
			h.Set("Relay-Inbox", rogue.NewRespInbox())
		}))
	}
	// Questions about a world's users.
	ask := nats.NewMsg("relay.node.n2.users")
	ask.Header.Set("Relay-Client-Id", "west")
	ask.Header.Set("Relay-Users-List", "1")
	res, err := rogue.RequestMsg(ask, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Users   []world.User `json:"users"`
		ErrKind string       `json:"errKind"`
	}
	if err := json.Unmarshal(res.Data, &rep); err != nil || len(rep.Users) != 0 || rep.ErrKind != world.ErrPermission.Error() {
		t.Fatalf("an unsigned question about west's users: %s", res.Data)
	}
	// The nodes' own calls are served as before.
	if got := get(); got.Status != http.StatusOK {
		t.Fatalf("a forwarded read after the rogue's attempts: %d %s", got.Status, got.Body)
	}
}
