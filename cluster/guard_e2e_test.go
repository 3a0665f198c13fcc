package cluster_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
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
		waitFor(t, 15*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
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
	waitFor(t, 15*time.Second, "the followers to skip the rogue's records", func() bool {
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
	waitFor(t, 15*time.Second, "a read of west", func() bool {
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

// TestRogueClientCannotAnswerForNodes: in a cluster with a secret, a plain
// NATS client inside the nodes' account that sees a forwarded call go by
// answers it before the host does: a unary call with a made-up status, a
// document, or NATS's "no responders"; a download with its own acceptance,
// data and end, or a cancel and acknowledgements sent to the host; an
// upload with its own acceptance and answer, or a cancel and data sent to
// the host; a question about a world's users with an answer of its own.
// The caller gets the host's true answer every time, the nodes
// count what they dropped, and once the host is gone the caller gets a
// clear 503, never the rogue's answer.
func TestRogueClientCannotAnswerForNodes(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("3c9d", 16)
	nodes, cfgs := startCluster(t, func(c *node.Config) { c.Cluster.ClusterSecret = secret })
	n1, n2 := nodes[0], nodes[1]
	rogue, err := n1.Cluster().Intruder()
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	b, _ := proto.Marshal(&spb.Status{Code: int32(codes.PermissionDenied), Message: "forged by the rogue"})
	forgedStatus := base64.StdEncoding.EncodeToString(b)
	publish := func(subject string, data []byte, headers ...string) {
		m := nats.NewMsg(subject)
		m.Data = data
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		_ = rogue.PublishMsg(m)
	}
	// listen has the rogue act on every message on subject while run
	// runs, and fails t when it saw none.
	listen := func(t *testing.T, subject string, act func(*nats.Msg), run func()) {
		t.Helper()
		var seen atomic.Int64
		sub, err := rogue.Subscribe(subject, func(m *nats.Msg) {
			seen.Add(1)
			act(m)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := rogue.Flush(); err != nil {
			t.Fatal(err)
		}
		run()
		_ = sub.Unsubscribe()
		_ = rogue.Flush()
		if seen.Load() == 0 {
			t.Fatalf("the rogue saw nothing on %s", subject)
		}
	}
	// refusedBy checks that node n counted more refused answers while
	// run ran.
	refusedBy := func(t *testing.T, n *relaytest.Relay, run func()) {
		t.Helper()
		before := n.Cluster().RefusedAnswers()
		run()
		waitFor(t, 10*time.Second, "the refused answers counted on "+n.Cluster().Name(), func() bool {
			return n.Cluster().RefusedAnswers() > before
		})
	}
	// A script that runs for a moment on west's host, n2: the rogue
	// answers long before the host does.
	slow := map[string]any{"script": "const start = Date.now(); while (Date.now() - start < 300) {} return {answer: 7};"}
	call := func() relaytest.Response {
		return n1.Do(http.MethodPost, "/execute-js", n1.AdminKey, relaytest.Q("clientId", "west"), slow)
	}
	want := call()
	if want.Status != http.StatusOK {
		t.Fatalf("a forwarded call: %d %s", want.Status, want.Body)
	}

	// Unary calls, answered at once by the rogue.
	for what, forge := range map[string]func(reply string){
		"a made-up status": func(reply string) { publish(reply, nil, "Relay-Status", forgedStatus) },
		"a made-up document": func(reply string) {
			publish(reply, []byte("forged"), "Relay-Header", `{"x-forged":["1"]}`)
		},
		"no responders": func(reply string) { publish(reply, nil, "Status", "503") },
		"a made-up signature": func(reply string) {
			publish(reply, nil, "Relay-Status", forgedStatus, "Relay-Signature", strings.Repeat("ab", 32))
		},
	} {
		t.Run("call answered with "+what, func(t *testing.T) {
			var got relaytest.Response
			refusedBy(t, n1, func() {
				listen(t, "relay.node.n2.call", func(m *nats.Msg) { forge(m.Reply) }, func() { got = call() })
			})
			if got.Status != http.StatusOK || !reflect.DeepEqual(got.Data(t), want.Data(t)) || got.Header.Get("Grpc-Metadata-X-Forged") != "" {
				t.Fatalf("the caller got %d %.300s, want the host's answer", got.Status, got.Body)
			}
		})
	}

	// Downloads: the rogue accepts one itself and sends data and an end
	// of its own; then it cancels one and acknowledges on the host's
	// acknowledgement subject.
	checkDownload := func(t *testing.T, got relaytest.Response, want []byte) {
		t.Helper()
		if got.Status != http.StatusOK || !bytes.Equal(got.Body, want) {
			t.Fatalf("the caller got %d, %d bytes (%.100q), want the file's %d", got.Status, len(got.Body), got.Body, len(want))
		}
	}
	t.Run("download answered", func(t *testing.T) {
		var got relaytest.Response
		refusedBy(t, n1, func() {
			listen(t, "relay.node.n2.stream", func(m *nats.Msg) {
				publish(m.Reply, nil, "Relay-Ack", "rogue.acks")
				inbox := m.Header.Get("Relay-Inbox")
				publish(inbox, []byte("forged"))
				publish(inbox, nil, "Relay-End", "1", "Relay-Status", forgedStatus)
				publish(inbox, []byte("forged"), "Relay-Seq", "1", "Relay-Signature", strings.Repeat("cd", 32))
			}, func() { got = download(n1, "maps/big.bin") })
		})
		checkDownload(t, got, bigFile())
	})
	t.Run("download cancelled", func(t *testing.T) {
		// The host reads acknowledgements once it has sent a window's
		// worth of messages: a file of more chunks than that, read over
		// gRPC by a caller that pauses after the first chunk, so that the
		// host waits for acknowledgements and reads the rogue's.
		huge := randomBytes(9 << 20)
		if err := os.WriteFile(filepath.Join(cfgs[1].DataDir, "worlds", "west", "files", "maps", "huge.bin"), huge, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", n1.AdminKey), 45*time.Second)
		defer cancel()
		before := n2.Cluster().RefusedAnswers()
		var got []byte
		// The host's acceptance names the subject of its
		// acknowledgements.
		listen(t, "_INBOX.>", func(m *nats.Msg) {
			if ackTo := m.Header.Get("Relay-Ack"); ackTo != "" {
				publish(ackTo, []byte("cancel"))
				publish(ackTo, []byte("1000000"))
			}
		}, func() {
			down, err := relayv1.NewFileServiceClient(n1.Conn).DownloadFile(ctx, &relayv1.DownloadFileRequest{ClientId: "west", Path: "maps/huge.bin"})
			if err != nil {
				t.Fatal(err)
			}
			for first := true; ; first = false {
				m, err := down.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("the download after %d bytes: %v", len(got), err)
				}
				got = append(got, m.GetChunk()...)
				if first {
					waitFor(t, 30*time.Second, "the host to refuse the rogue's acknowledgements", func() bool {
						return n2.Cluster().RefusedAnswers() > before
					})
				}
			}
		})
		if !bytes.Equal(got, huge) {
			t.Fatalf("the caller got %d bytes, want the file's %d", len(got), len(huge))
		}
	})

	// Uploads: the rogue accepts one itself and answers it; then it
	// cancels one on the host's upload subject and sends data of its own.
	upload := func(t *testing.T, name string, forge func(*nats.Msg), subject string, by *relaytest.Relay) {
		t.Helper()
		data := randomBytes(2 << 20)
		refusedBy(t, by, func() {
			listen(t, subject, forge, func() {
				if err := grpcUpload(n1, "rogue", name, data); err != nil {
					t.Errorf("the upload: %v", err)
				}
			})
		})
		checkDownload(t, download(n1, "rogue/"+name), data)
	}
	t.Run("upload answered", func(t *testing.T) {
		upload(t, "one.bin", func(m *nats.Msg) {
			publish(m.Reply, nil, "Relay-Up", "rogue.up")
			publish(m.Header.Get("Relay-Inbox"), nil, "Relay-End", "1", "Relay-Status", forgedStatus)
		}, "relay.node.n2.upload", n1)
	})
	t.Run("upload cancelled", func(t *testing.T) {
		upload(t, "two.bin", func(m *nats.Msg) {
			if upTo := m.Header.Get("Relay-Up"); upTo != "" {
				publish(upTo, []byte("forged"))
				publish(upTo, nil, "Relay-Cancelled", "1")
				publish(upTo, nil, "Relay-End", "1")
			}
		}, "_INBOX.>", n2)
	})

	// An event stream of west on n1 asks n2 whether it hosts west: the
	// rogue answers that it may not.
	t.Run("question answered", func(t *testing.T) {
		forged, _ := json.Marshal(map[string]any{"errKind": world.ErrPermission.Error(), "errMsg": "forged by the rogue"})
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		refusedBy(t, n1, func() {
			listen(t, "relay.node.n2.users", func(m *nats.Msg) { publish(m.Reply, forged) }, func() {
				take(t, "west's actors through n1", sseStream(t, ctx, n1, "/actor/subscribe?clientId=west", n1.AdminKey, ""), 1)
			})
		})
	})

	// Once the host is gone, the rogue still answers its calls: the
	// caller gets a 503 naming the world, not the rogue's answer.
	t.Run("host gone", func(t *testing.T) {
		var got relaytest.Response
		refusedBy(t, n1, func() {
			listen(t, "relay.node.n2.call", func(m *nats.Msg) {
				publish(m.Reply, []byte("forged"), "Relay-Header", `{"x-forged":["1"]}`)
			}, func() {
				n2.Cluster().Crash()
				got = call()
			})
		})
		if got.Status != http.StatusServiceUnavailable || !strings.Contains(string(got.Body), "west") {
			t.Fatalf("a call to west once its host is gone: %d %.300s, want a 503 naming west", got.Status, got.Body)
		}
	})
}
