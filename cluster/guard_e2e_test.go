package cluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// TestRogueClientCannotWriteAWorldsLog: with a cluster secret, a plain
// NATS client inside the nodes' account that appends to a replicated
// world's log (a record it saw go by, without its signature or with it,
// at another place in the log) changes no follower's copy: the followers
// skip the records and count them, and the world taken over after the
// host's next append was refused holds only the nodes' writes. The
// rogue's liveness pings go unanswered.
func TestRogueClientCannotWriteAWorldsLog(t *testing.T) {
	secret := strings.Repeat("5b0c", 16)
	nodes, cfgs := startReplicated(t, func(c *node.Config) { c.Cluster.ClusterSecret = secret })
	n1 := nodes[0]
	client := &http.Client{Timeout: 20 * time.Second}
	rogue, err := n1.Cluster().Intruder()
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	// The first write may meet the world's claim under way on a loaded
	// machine: it is retried.
	waitFor(t, 30*time.Second, "a first write", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "first", 1) == http.StatusOK
	})
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}

	// The rogue sees the record of a write setting rogue=1 go by; the
	// nodes then set rogue=2.
	sniff, err := rogue.SubscribeSync("relay.world.west")
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the write rogue=1", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "rogue", 1) == http.StatusOK
	})
	// Every record of that write (its group, and the group that records
	// its answer).
	var records []*nats.Msg
	for {
		m, err := sniff.NextMsg(2 * time.Second)
		if err != nil {
			break
		}
		if m.Header.Get("Relay-Signature") == "" {
			t.Fatalf("a record went unsigned: %v", m.Header)
		}
		records = append(records, m)
	}
	if len(records) == 0 {
		t.Fatal("the rogue saw no record")
	}
	_ = sniff.Unsubscribe()
	waitFor(t, 30*time.Second, "the write rogue=2", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "rogue", 2) == http.StatusOK
	})

	// It appends the records again: as seen (signed for another place in
	// the log), without their signature, and with a made-up one.
	js, err := jetstream.New(rogue)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, seen := range records {
		for _, sig := range []string{seen.Header.Get("Relay-Signature"), "", strings.Repeat("ab", 32)} {
			m := nats.NewMsg("relay.world.west")
			m.Data = seen.Data
			if sig != "" {
				m.Header.Set("Relay-Signature", sig)
			}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("the rogue's append: %v", err)
			}
		}
	}
	appended := int64(3 * len(records))
	// The followers skip the records and count them.
	waitFor(t, 30*time.Second, "the followers to skip the rogue's records", func() bool {
		r1, _, _ := nodes[0].Cluster().Refused()
		r3, _, _ := nodes[2].Cluster().Refused()
		return r1 == appended && r3 == appended
	})
	// The host's next append is refused (the log moved on without it):
	// a follower takes the world over, and writes go on.
	waitFor(t, 30*time.Second, "a write after the rogue's appends", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "after", 1) == http.StatusOK
	})
	var flags map[string]any
	waitFor(t, 30*time.Second, "a read of west", func() bool {
		var st int
		flags, st = ariaFlags(t, n1)
		return st == http.StatusOK
	})
	if flags["rogue"] != float64(2) || flags["after"] != float64(1) || flags["first"] != float64(1) {
		t.Fatalf("west after the rogue's appends: %v, want first=1, rogue=2, after=1", flags)
	}

	// An unsigned ping gets no answer (a node's pings are answered, or the
	// writes above would not have gone through).
	if _, err := rogue.Request("relay.node.n2.ping", nil, 500*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("an unsigned ping: %v, want no answer", err)
	}
	if _, pings, _ := nodes[1].Cluster().Refused(); pings != 1 {
		t.Fatalf("n2 counted %d refused pings, want 1", pings)
	}
}
