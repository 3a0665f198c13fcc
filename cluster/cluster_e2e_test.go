package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// clusterLease is the world lease of the cluster tests: short, so that a
// lost host shows quickly.
const clusterLease = 3 * time.Second

// seedWorld creates a world from the demo seed under clientID in dataDir,
// before a relay starts there.
func seedWorld(t *testing.T, dataDir, clientID string) {
	t.Helper()
	host, err := world.OpenHost(dataDir, world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Create(context.Background(), clientID, seed); err != nil {
		t.Fatalf("create world %s: %v", clientID, err)
	}
}

// clusterNode starts one relay of a cluster with its cluster
// configuration and its own data directory.
func clusterNode(t *testing.T, cc cluster.Config, demoWorld bool, adjust ...func(*node.Config)) *relaytest.Relay {
	t.Helper()
	return relaytest.StartLogged(t, testLog(t).With("relay", cc.NodeName), func(c *node.Config) {
		c.DataDir = cc.DataDir
		c.Demo = demoWorld
		c.Cluster = cc
		for _, f := range adjust {
			f(c)
		}
	})
}

// startCluster starts three relays as one cluster: n1 holds the demo
// world, n2 the world "west", and n3 a second world "demo" of its own:
// one of n1 and n3 must refuse to host its demo. adjust changes each
// node's configuration before it starts.
func startCluster(t *testing.T, adjust ...func(*node.Config)) ([]*relaytest.Relay, []cluster.Config) {
	t.Helper()
	cfgs := clustertest.Configs(t, 3, clusterLease)
	seedWorld(t, cfgs[1].DataDir, "west")
	// A file of many chunks in west's file area, for downloads through
	// other nodes.
	big := filepath.Join(cfgs[1].DataDir, "worlds", "west", "files", "maps")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, "big.bin"), bigFile(), 0o644); err != nil {
		t.Fatal(err)
	}
	seedWorld(t, cfgs[2].DataDir, "demo")
	nodes := make([]*relaytest.Relay, 3)
	// The shared state is kept three ways: the cluster answers once all
	// three are up, so they start together.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { nodes[i] = clusterNode(t, cfgs[i], i == 0, adjust...) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	shareAdminKey(nodes...)
	// Stop them together too: a node stopping alone after the others
	// waits for a quorum that is gone.
	t.Cleanup(func() { stopAll(nodes) })
	waitServed(t, nodes, "demo", "west")
	return nodes, cfgs
}

// waitServed waits until a read of each of worlds answers through every
// node: each node then knows the cluster's admin key and every world's
// host, so that a test's first call does not meet a cluster that is still
// settling (on a loaded machine, a node may learn of the others' worlds
// and keys a moment after it started). Reads change nothing a test looks
// at.
func waitServed(t *testing.T, nodes []*relaytest.Relay, worlds ...string) {
	t.Helper()
	for i, n := range nodes {
		for _, clientID := range worlds {
			var got relaytest.Response
			deadline := time.Now().Add(60 * time.Second)
			for {
				got = n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", clientID, "uuid", relaytest.AriaUUID), nil)
				if got.Status == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("world %s not served through n%d after 60s: %d %s", clientID, i+1, got.Status, got.Body)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// shareAdminKey gives every node the cluster's admin key: the nodes share
// their keys (package cluster/shared), and only the node that made the
// cluster's first key has it as its own.
func shareAdminKey(nodes ...*relaytest.Relay) {
	var key string
	for _, n := range nodes {
		if n.AdminKey != "" {
			key = n.AdminKey
		}
	}
	for _, n := range nodes {
		n.AdminKey = key
	}
}

// waitUntil polls cond for up to thirty seconds: long enough for a loaded
// machine, and no longer than needed on a quiet one.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectLinked pairs a tabletop with a GM through node n, connects it
// there and returns it with its clientId; handler answers the relay's
// requests (nil: none). The tabletop drops when the test ends.
func connectLinked(t *testing.T, n *relaytest.Relay, fingerprint string, handler func(context.Context, linktest.Request) (any, bool)) (*linktest.Tabletop, string) {
	t.Helper()
	ctx := context.Background()
	code := n.Do(http.MethodPost, "/pairing-codes", n.AdminKey, nil, map[string]any{})
	if code.Status != http.StatusOK {
		t.Fatalf("pairing code: %d %s", code.Status, code.Body)
	}
	tt := linktest.New(linktest.Config{RelayURL: n.Base, WorldID: "w", WorldTitle: "Linked Tales", SystemID: "dnd5e", ServerFingerprint: fingerprint,
		Players: []link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true}},
		Handler: handler})
	if _, err := tt.Pair(ctx, code.Data(t)["code"].(string)); err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	return tt, clientID
}

// bigFile is the content of west's maps/big.bin: 3 MiB that no two
// chunks repeat, so that a chunk lost, repeated or out of order shows.
func bigFile() []byte {
	b := make([]byte, 3<<20)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// stopAll stops relays at once.
func stopAll(nodes []*relaytest.Relay) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// The server's graceful stop waits for its gRPC clients.
			_ = n.Conn.Close()
			_ = n.Close(ctx)
		})
	}
	wg.Wait()
}

// withoutRequestID drops the envelope's request id, which differs from
// call to call, so that two answers can be compared byte for byte.
func withoutRequestID(t *testing.T, body []byte) []byte {
	t.Helper()
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, body)
	}
	delete(v, "requestId")
	out, _ := json.Marshal(v)
	return out
}

// TestCluster runs three relays in process as one cluster and checks that
// a call for a world is served by its host from any node, that unknown
// worlds are unknown everywhere, that a second node refuses a duplicate
// client id, and that a world whose host stopped is unavailable at once
// and served again when the host returns.
func TestCluster(t *testing.T) {
	began := time.Now()
	nodes, cfgs := startCluster(t)
	t.Logf("cluster started in %v", time.Since(began))
	t.Cleanup(func() { t.Logf("test done at %v", time.Since(began)) })
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	t.Run("REST call routed to the host", func(t *testing.T) {
		direct := n2.Do(http.MethodGet, "/get", n2.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		if direct.Status != http.StatusOK {
			t.Fatalf("on the host: %d %s", direct.Status, direct.Body)
		}
		for _, edge := range []*relaytest.Relay{n1, n3} {
			got := edge.Do(http.MethodGet, "/get", edge.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
			if got.Status != http.StatusOK {
				t.Fatalf("forwarded: %d %s", got.Status, got.Body)
			}
			if !bytes.Equal(withoutRequestID(t, got.Body), withoutRequestID(t, direct.Body)) {
				t.Fatalf("forwarded answer differs from the host's:\n%s\n%s", got.Body, direct.Body)
			}
			if id := got.JSON(t)["requestId"]; got.Header.Get("x-request-id") != "" && id != got.Header.Get("x-request-id") {
				t.Fatalf("request id %v, header %q", id, got.Header.Get("x-request-id"))
			}
		}
		// A write on one node is read on another.
		upd := n3.Do(http.MethodPut, "/update", n3.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), map[string]any{"data": map[string]any{"name": "Aria of the West"}})
		if upd.Status != http.StatusOK {
			t.Fatalf("update through n3: %d %s", upd.Status, upd.Body)
		}
		got := n2.Do(http.MethodGet, "/get", n2.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		if !strings.Contains(string(got.Body), "Aria of the West") {
			t.Fatalf("the host does not have the write: %s", got.Body)
		}
	})

	t.Run("errors of the host come back whole", func(t *testing.T) {
		direct := n2.Do(http.MethodGet, "/get", n2.AdminKey, relaytest.Q("clientId", "west", "uuid", "Actor.nobodyAtAll00001"), nil)
		got := n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", "Actor.nobodyAtAll00001"), nil)
		if got.Status != direct.Status || got.Status != http.StatusNotFound {
			t.Fatalf("status %d, host %d", got.Status, direct.Status)
		}
		if !bytes.Equal(withoutRequestID(t, got.Body), withoutRequestID(t, direct.Body)) {
			t.Fatalf("forwarded error differs:\n%s\n%s", got.Body, direct.Body)
		}
	})

	t.Run("gRPC call routed to the host", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", n3.AdminKey)
		resp, err := relayv1.NewDocumentServiceClient(n3.Conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "west", Uuid: relaytest.AriaUUID})
		if err != nil {
			t.Fatalf("GetDocument through n3: %v", err)
		}
		if resp.GetDocument().GetStructValue().GetFields()["name"].GetStringValue() != "Aria of the West" {
			t.Fatalf("unexpected document: %s", resp.GetDocument())
		}
		_, err = relayv1.NewDocumentServiceClient(n3.Conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "west", Uuid: "Actor.nobodyAtAll00001"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("missing document through n3: %v", err)
		}
	})

	t.Run("downloads and uploads routed to the host", func(t *testing.T) {
		direct := n2.Do(http.MethodGet, "/download", n2.AdminKey, relaytest.Q("clientId", "west", "path", "maps/big.bin"), nil)
		if direct.Status != http.StatusOK || !bytes.Equal(direct.Body, bigFile()) {
			t.Fatalf("download on the host: %d, %d bytes", direct.Status, len(direct.Body))
		}
		got := n1.Do(http.MethodGet, "/download", n1.AdminKey, relaytest.Q("clientId", "west", "path", "maps/big.bin"), nil)
		if got.Status != http.StatusOK || !bytes.Equal(got.Body, direct.Body) || got.Header.Get("Content-Type") != direct.Header.Get("Content-Type") {
			t.Fatalf("download through n1: %d, %d bytes, %q", got.Status, len(got.Body), got.Header.Get("Content-Type"))
		}
		// The host's errors come back whole, streams or not.
		missing := n1.Do(http.MethodGet, "/download", n1.AdminKey, relaytest.Q("clientId", "west", "path", "maps/none.bin"), nil)
		hostMissing := n2.Do(http.MethodGet, "/download", n2.AdminKey, relaytest.Q("clientId", "west", "path", "maps/none.bin"), nil)
		if missing.Status != http.StatusNotFound || !bytes.Equal(withoutRequestID(t, missing.Body), withoutRequestID(t, hostMissing.Body)) {
			t.Fatalf("missing file through n1: %d %s, host %s", missing.Status, missing.Body, hostMissing.Body)
		}
		// Over gRPC too.
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", n3.AdminKey)
		dl, err := relayv1.NewFileServiceClient(n3.Conn).DownloadFile(ctx, &relayv1.DownloadFileRequest{ClientId: "west", Path: "maps/big.bin"})
		if err != nil {
			t.Fatal(err)
		}
		var data []byte
		for {
			m, err := dl.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("gRPC download through n3: %v", err)
			}
			data = append(data, m.GetChunk()...)
		}
		if !bytes.Equal(data, bigFile()) {
			t.Fatalf("gRPC download through n3: %d bytes", len(data))
		}
		// An upload through n3 lands on the host, in chunks more than the
		// forwarding window, and reads back whole through n1.
		content := bigFile()[:1<<20]
		upload := func(via *relaytest.Relay, overwrite bool) (*relayv1.UploadFileResponse, error) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", via.AdminKey)
			up, err := relayv1.NewFileServiceClient(via.Conn).UploadFile(ctx)
			if err != nil {
				return nil, err
			}
			if err := up.Send(&relayv1.UploadFileRequest{ClientId: "west", Path: "uploads", Filename: "copy.bin", Overwrite: overwrite}); err != nil {
				return nil, err
			}
			for off := 0; off < len(content); off += 16 << 10 {
				if err := up.Send(&relayv1.UploadFileRequest{Chunk: content[off:min(off+16<<10, len(content))]}); err != nil {
					break // the host refused: CloseAndRecv says why
				}
			}
			return up.CloseAndRecv()
		}
		res, err := upload(n3, false)
		if err != nil || res.GetSize() != float64(len(content)) {
			t.Fatalf("upload through n3: %v %v", res, err)
		}
		back := n1.Do(http.MethodGet, "/download", n1.AdminKey, relaytest.Q("clientId", "west", "path", "uploads/copy.bin"), nil)
		if back.Status != http.StatusOK || !bytes.Equal(back.Body, content) {
			t.Fatalf("uploaded file through n1: %d, %d bytes", back.Status, len(back.Body))
		}
		// The host's refusal comes back as the host gives it: the file
		// exists.
		_, err = upload(n3, false)
		_, hostErr := upload(n2, false)
		if hostErr == nil || status.Code(err) != status.Code(hostErr) || status.Convert(err).Message() != status.Convert(hostErr).Message() {
			t.Fatalf("second upload through n3: %v; on the host: %v", err, hostErr)
		}
	})

	t.Run("unknown world is 404 on every node", func(t *testing.T) {
		for i, n := range nodes {
			got := n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", "nowhere", "uuid", relaytest.AriaUUID), nil)
			if got.Status != http.StatusNotFound || !strings.Contains(got.ErrorText(t), "nowhere") {
				t.Fatalf("n%d: %d %s", i+1, got.Status, got.Body)
			}
		}
	})

	t.Run("duplicate client id refused", func(t *testing.T) {
		// n1 and n3 both have a world demo on disk: one holds it, the
		// other refuses it.
		refusedBy := map[string]bool{}
		for i, n := range []*relaytest.Relay{n1, n3} {
			for _, h := range n.Registry().Snapshot() {
				if h.ClientID == "demo" && h.Refused {
					refusedBy[[]string{"n1", "n3"}[i]] = true
				}
			}
		}
		if len(refusedBy) != 1 {
			t.Fatalf("refused by %v, want exactly one of n1 and n3", refusedBy)
		}
		// Every node reaches the holder's copy: a write through any node
		// is read through every other.
		upd := n2.Do(http.MethodPut, "/update", n2.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.BromUUID), map[string]any{"data": map[string]any{"name": "Brom the Only"}})
		if upd.Status != http.StatusOK {
			t.Fatalf("update through n2: %d %s", upd.Status, upd.Body)
		}
		for i, n := range []*relaytest.Relay{n1, n3} {
			got := n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.BromUUID), nil)
			if got.Status != http.StatusOK || !strings.Contains(string(got.Body), "Brom the Only") {
				t.Fatalf("demo through %s: %d %s", []string{"n1", "n3"}[i], got.Status, got.Body)
			}
		}
	})

	t.Run("linked world hosted by the node holding its socket", func(t *testing.T) {
		tt, clientID := connectLinked(t, n1, "fp-cluster", func(_ context.Context, req linktest.Request) (any, bool) {
			var m map[string]any
			_ = req.Params(&m)
			if req.Type == "entity" {
				return map[string]any{"uuid": m["uuid"], "data": map[string]any{"_id": "hero", "name": "Linked Hero", "type": "character"}}, true
			}
			return nil, false
		})
		get := func() relaytest.Response {
			return n3.Do(http.MethodGet, "/get", n3.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hero"), nil)
		}
		var got relaytest.Response
		waitUntil(t, "the linked world served through n3", func() bool { got = get(); return got.Status == http.StatusOK })
		if got.Data(t)["name"] != "Linked Hero" {
			t.Fatalf("linked world through n3: %s", got.Body)
		}
		// Its socket closed, the world is unavailable on every node.
		tt.Drop()
		waitUntil(t, "a 503 for the dropped linked world", func() bool { got = get(); return got.Status == http.StatusServiceUnavailable })
		if !strings.Contains(got.ErrorText(t), clientID) {
			t.Fatalf("503 without the world's id: %s", got.Body)
		}
	})

	t.Run("status and readiness", func(t *testing.T) {
		for i, n := range nodes {
			if got := n.Do(http.MethodGet, "/readyz", "", nil, nil); got.Status != http.StatusOK {
				t.Fatalf("n%d /readyz: %d %s", i+1, got.Status, got.Body)
			}
		}
		// The status reads the nodes' records within two seconds; on a
		// loaded machine it may say that it could not read them all, and
		// is asked again.
		var got relaytest.Response
		var env struct {
			Type string         `json:"type"`
			Data cluster.Status `json:"data"`
		}
		waitUntil(t, "a complete status", func() bool {
			got = n1.Do(http.MethodGet, "/cluster", n1.AdminKey, nil, nil)
			if got.Status != http.StatusOK {
				t.Fatalf("/cluster: %d %s", got.Status, got.Body)
			}
			if err := json.Unmarshal(got.Body, &env); err != nil {
				t.Fatal(err)
			}
			return env.Data.JetStream.Error == ""
		})
		st := env.Data
		if env.Type != "cluster-result" || !st.Enabled || st.Node != "n1" || !st.NATS.Connected || !st.JetStream.OK || st.JetStream.Replicas != 3 {
			t.Fatalf("status: %s", got.Body)
		}
		hosts := map[string]string{}
		for _, n := range st.Nodes {
			if !n.Live {
				t.Fatalf("node %s not live: %s", n.Name, got.Body)
			}
			for _, w := range n.Worlds {
				if w.Live {
					hosts[w.ClientID] = n.Name
				}
			}
		}
		// Every node lists each JetStream peer once, itself among them,
		// whether or not it leads the meta group: at least two of the
		// three do not.
		for i, n := range nodes {
			got := n.Do(http.MethodGet, "/cluster", n.AdminKey, nil, nil)
			var env struct {
				Data cluster.Status `json:"data"`
			}
			if err := json.Unmarshal(got.Body, &env); err != nil {
				t.Fatal(err)
			}
			if peers := strings.Join(env.Data.JetStream.Peers, ","); peers != "n1,n2,n3" || env.Data.JetStream.MetaLeader == "" {
				t.Errorf("n%d's JetStream peers: %q, want n1,n2,n3 (leader %q)", i+1, peers, env.Data.JetStream.MetaLeader)
			}
		}
		if len(st.Nodes) != 3 || hosts["west"] != "n2" || hosts["demo"] == "" {
			t.Fatalf("nodes and worlds: %v\n%s", hosts, got.Body)
		}
		// Every node lists every world of the cluster.
		for i, n := range nodes {
			got := n.Do(http.MethodGet, "/clients", n.AdminKey, nil, nil)
			if got.Status != http.StatusOK || !strings.Contains(string(got.Body), `"west"`) || !strings.Contains(string(got.Body), `"demo"`) {
				t.Fatalf("n%d /clients: %d %s", i+1, got.Status, got.Body)
			}
		}
		// The status is for admins only.
		if got := n1.Do(http.MethodGet, "/cluster", "", nil, nil); got.Status != http.StatusUnauthorized {
			t.Fatalf("/cluster without a key: %d %s", got.Status, got.Body)
		}
		reader, _ := n1.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{keys.ScopeEntityRead}})
		if got := n1.Do(http.MethodGet, "/cluster", reader, nil, nil); got.Status != http.StatusForbidden || !strings.Contains(got.ErrorText(t), "admin") {
			t.Fatalf("/cluster with a reader key: %d %s", got.Status, got.Body)
		}
		if got := n1.Do(http.MethodPost, "/cluster", n1.AdminKey, nil, nil); got.Status != http.StatusMethodNotAllowed {
			t.Fatalf("POST /cluster: %d %s", got.Status, got.Body)
		}
	})

	t.Run("host stopped, then back", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n2.Close(ctx); err != nil {
			t.Fatalf("stop n2: %v", err)
		}
		start := time.Now()
		got := n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		if got.Status != http.StatusServiceUnavailable || !strings.Contains(got.ErrorText(t), "west") {
			t.Fatalf("world of a stopped host: %d %s", got.Status, got.Body)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the 503 took %v", d)
		}
		began := time.Now()
		back := clusterNode(t, cfgs[1], false)
		shareAdminKey(n1, back)
		t.Logf("n2 back in %v", time.Since(began))
		t.Cleanup(func() { stopAll([]*relaytest.Relay{n1, back, n3}) })
		waitUntil(t, "world west served again after its host returned", func() bool {
			got = n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
			return got.Status == http.StatusOK
		})
		if !strings.Contains(string(got.Body), "Aria of the West") {
			t.Fatalf("the returned host lost a write: %s", got.Body)
		}

		// Cut off from the cluster (its NATS connection gone), the host
		// stops serving its world once its lease runs out, even to its
		// own callers, and the other nodes answer 503 within the forward
		// time-out.
		back.Cluster().Conn().Close()
		got = n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		if got.Status != http.StatusServiceUnavailable || !strings.Contains(got.ErrorText(t), "west") {
			t.Fatalf("world of a cut-off host, from n1: %d %s", got.Status, got.Body)
		}
		if got := back.Do(http.MethodGet, "/readyz", "", nil, nil); got.Status != http.StatusServiceUnavailable {
			t.Fatalf("/readyz of a cut-off node: %d %s", got.Status, got.Body)
		}
		backKey := n2.AdminKey // the same data directory, the same keys
		// It stops within its lease; the deadline leaves a loaded machine
		// room to answer the checks.
		deadline := time.Now().Add(clusterLease + 10*time.Second)
		for {
			got = back.Do(http.MethodGet, "/get", backKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
			if got.Status == http.StatusServiceUnavailable {
				break
			}
			if got.Status != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("cut-off host still answers for its world: %d %s", got.Status, got.Body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(got.ErrorText(t), "lease") {
			t.Fatalf("cut-off host's 503: %s", got.Body)
		}
	})
}
