package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"

	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/embedded"
)

// uploadFile uploads data as path (a directory and a file name) to west
// through a node, and returns the answer.
func uploadFile(via *relaytest.Relay, path string, data []byte, overwrite bool) relaytest.Response {
	dir, name := filepath.Split(path)
	return via.Do(http.MethodPost, "/upload", via.AdminKey, nil, map[string]any{
		"clientId": "west", "path": dir, "filename": name, "overwrite": overwrite,
		"fileData": base64.StdEncoding.EncodeToString(data),
	})
}

// grpcUpload uploads data as dir/name to west over gRPC through a node,
// in messages of 32 KiB.
func grpcUpload(via *relaytest.Relay, dir, name string, data []byte) error {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", via.AdminKey), 20*time.Second)
	defer cancel()
	up, err := relayv1.NewFileServiceClient(via.Conn).UploadFile(ctx)
	if err != nil {
		return err
	}
	msg := &relayv1.UploadFileRequest{ClientId: "west", Path: dir, Filename: name}
	for len(data) > 0 {
		n := min(len(data), 32<<10)
		msg.Chunk, data = data[:n], data[n:]
		if err := up.Send(msg); err != nil {
			// The server ended the call: its answer says why.
			break
		}
		msg = &relayv1.UploadFileRequest{}
	}
	_, err = up.CloseAndRecv()
	return err
}

// download reads a file of west through a node.
func download(via *relaytest.Relay, path string) relaytest.Response {
	return via.Do(http.MethodGet, "/download", via.AdminKey, relaytest.Q("clientId", "west", "path", path), nil)
}

// copyHolds reports whether a node's follower copy of west holds the file
// at path with exactly data.
func copyHolds(dataDir, path string, data []byte) bool {
	got, err := os.ReadFile(filepath.Join(dataDir, "replicas", "west", "files", filepath.FromSlash(path)))
	return err == nil && bytes.Equal(got, data)
}

// objectNames lists the objects (deleted ones left out) of west's object
// store, as a node sees it.
func objectNames(t *testing.T, via *relaytest.Relay) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obs, err := via.Cluster().JetStream().ObjectStore(ctx, "RELAY_FILES_west")
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		t.Logf("object store: %v", err)
		return []string{"(unreadable)"}
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Logf("object store listing: %v", err)
		return []string{"(unreadable)"}
	}
	var names []string
	for _, info := range list {
		names = append(names, info.Name)
	}
	slices.Sort(names)
	return names
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestReplicatedFilesOutliveTheirHost checks that a file uploaded to an
// embedded world through a node that does not host it reaches the
// followers' copies, that overwriting it replaces their copies and
// deletes the replaced object, that a new demo world's files reach its
// followers, that once the host dies a download through
// another node returns the same bytes from the new host, that the new host
// records uploads in turn, and that removing the world removes its
// object store.
func TestReplicatedFilesOutliveTheirHost(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}
	if st := flagWrite(client, n1.Base, n1.AdminKey, "first", 1); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}

	// Several of the object store's chunks (128 KiB each).
	first := randomBytes(300 << 10)
	if got := uploadFile(n1, "maps/big.bin", first, false); got.Status != http.StatusOK {
		t.Fatalf("upload through n1: %d %s", got.Status, got.Body)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the file in the copy of "+cfgs[i].NodeName, func() bool { return copyHolds(cfgs[i].DataDir, "maps/big.bin", first) })
	}
	if got := objectNames(t, n1); len(got) != 1 {
		t.Fatalf("objects after one upload: %v", got)
	}

	// An overwrite through n3 replaces the followers' copies; the object
	// it replaced is deleted.
	second := randomBytes(200 << 10)
	if got := uploadFile(n3, "maps/big.bin", second, true); got.Status != http.StatusOK {
		t.Fatalf("overwrite through n3: %d %s", got.Status, got.Body)
	}
	// The second file over gRPC, in several messages.
	note := bytes.Repeat([]byte("a handout. "), 20<<10)
	if err := grpcUpload(n3, "notes", "handout.txt", note); err != nil {
		t.Fatalf("gRPC upload through n3: %v", err)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the new file in the copy of "+cfgs[i].NodeName, func() bool {
			return copyHolds(cfgs[i].DataDir, "maps/big.bin", second) && copyHolds(cfgs[i].DataDir, "notes/handout.txt", note)
		})
	}
	if got := objectNames(t, n1); len(got) != 2 {
		t.Fatalf("objects after an overwrite and a second file: %v", got)
	}

	// A demo world made through n1 comes with files written past the
	// uploads' path: its followers get them too.
	if got := n1.Do(http.MethodPost, "/worlds", n1.AdminKey, nil, map[string]any{"clientId": "east", "title": "East", "seed": "demo"}); got.Status != http.StatusOK {
		t.Fatalf("make a demo world: %d %s", got.Status, got.Body)
	}
	welcome, err := os.ReadFile(filepath.Join("..", "world", "demo", "files", "handouts", "welcome.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		waitFor(t, 30*time.Second, "the demo world's files in the copy of "+cfgs[i].NodeName, func() bool {
			got, err := os.ReadFile(filepath.Join(cfgs[i].DataDir, "replicas", "east", "files", "handouts", "welcome.md"))
			return err == nil && bytes.Equal(got, welcome)
		})
	}

	n2.Cluster().Crash()
	for _, via := range []*relaytest.Relay{n1, n3} {
		waitFor(t, 60*time.Second, "the file downloaded after the failover", func() bool {
			got := download(via, "maps/big.bin")
			return got.Status == http.StatusOK && bytes.Equal(got.Body, second)
		})
		if got := download(via, "notes/handout.txt"); got.Status != http.StatusOK || !bytes.Equal(got.Body, note) {
			t.Fatalf("second file after the failover: %d %q", got.Status, got.Body)
		}
	}

	// The new host records uploads: the other survivor's copy gets them.
	third := []byte("after the failover")
	waitFor(t, 60*time.Second, "an upload after the failover", func() bool {
		got := uploadFile(n1, "notes/later.txt", third, false)
		return got.Status == http.StatusOK
	})
	host := ""
	for _, h := range n1.Registry().Snapshot() {
		if h.ClientID == "west" && h.Live {
			host = h.Node
		}
	}
	follower, newHost := n3, n1
	followerDir := cfgs[2].DataDir
	switch host {
	case "n1":
	case "n3":
		follower, newHost, followerDir = n1, n3, cfgs[0].DataDir
	default:
		t.Fatalf("west is hosted by %q after the failover", host)
	}
	waitFor(t, 30*time.Second, "the later file in the remaining follower's copy", func() bool { return copyHolds(followerDir, "notes/later.txt", third) })
	if got := objectNames(t, follower); len(got) != 3 {
		t.Fatalf("objects after the failover: %v", got)
	}

	// Removing the world removes its object store.
	if got := newHost.Do(http.MethodDelete, "/worlds/west", newHost.AdminKey, nil, nil); got.Status != http.StatusOK {
		t.Fatalf("delete west: %d %s", got.Status, got.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := follower.Cluster().JetStream().ObjectStore(ctx, "RELAY_FILES_west"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("west's object store after its removal: %v", err)
	}
}

// TestFencedHostCannotRecordAFile checks that a host that lost its lease
// (a paused process) cannot write a file into the world: the upload on its
// own engine is refused and leaves nothing, in its area, in the object
// store or in any copy, while uploads through it reach the new host.
func TestFencedHostCannotRecordAFile(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	ctx := context.Background()
	if st := flagWrite(client, n1.Base, n1.AdminKey, "first", 1); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}
	w, err := embedded.NewRegistry(n2.Worlds(), embedded.Options{DataDir: cfgs[1].DataDir}).World(ctx, "west")
	if err != nil {
		t.Fatal(err)
	}
	area := w.(world.Files)
	if _, err := area.WriteFile(ctx, nil, world.WriteFileParams{Dir: "maps", Name: "before.txt"}, strings.NewReader("before")); err != nil {
		var we *world.Error
		if errors.As(err, &we) {
			err = errors.Join(err, we.Cause)
		}
		t.Fatalf("a write on the host's own engine while it holds the lease: %v", err)
	}

	n2.Registry().HoldRenewals()
	waitFor(t, 60*time.Second, "another node serving west", func() bool {
		for _, h := range n1.Registry().Snapshot() {
			if h.ClientID == "west" && h.Node != "n2" && h.Live {
				return true
			}
		}
		return false
	})
	_, err = area.WriteFile(ctx, nil, world.WriteFileParams{Dir: "maps", Name: "stale.txt"}, strings.NewReader("stale"))
	if !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("a write on the replaced host's engine: %v", err)
	}
	for _, dir := range []string{
		filepath.Join(cfgs[1].DataDir, "worlds", "west", "files", "maps", "stale.txt"),
		filepath.Join(cfgs[1].DataDir, "replicas", "west", "files", "maps", "stale.txt"),
	} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused file is at %s: %v", dir, err)
		}
	}
	if got := objectNames(t, n1); len(got) != 1 {
		t.Fatalf("objects after the refused write: %v", got)
	}
	// An upload through the former host reaches the new one, which also
	// serves the file written before.
	waitFor(t, 30*time.Second, "an upload through n2", func() bool {
		return uploadFile(n2, "maps/viaN2.txt", []byte("via n2"), false).Status == http.StatusOK
	})
	for path, want := range map[string]string{"maps/before.txt": "before", "maps/viaN2.txt": "via n2"} {
		if got := download(n1, path); got.Status != http.StatusOK || string(got.Body) != want {
			t.Fatalf("%s after the take-over: %d %q", path, got.Status, got.Body)
		}
	}
	if got := download(n1, "maps/stale.txt"); got.Status != http.StatusNotFound {
		t.Fatalf("the refused file after the take-over: %d %q", got.Status, got.Body)
	}
}

// TestUploadWaitsForANewFileStore checks that an upload whose object the
// world's store does not take at once (no server answers, as when the
// store was made a moment ago) is sent again from its start, and is
// acknowledged with every byte in the followers' copies.
func TestUploadWaitsForANewFileStore(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2 := nodes[0], nodes[1]
	if got := uploadFile(n1, "maps/first.bin", []byte("the store exists"), false); got.Status != http.StatusOK {
		t.Fatalf("first upload: %d %s", got.Status, got.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n2.Registry().FailNextFilePuts(ctx, "west", 2); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(300 << 10)
	if got := uploadFile(n1, "maps/big.bin", data, false); got.Status != http.StatusOK {
		t.Fatalf("upload while the store does not answer: %d %s", got.Status, got.Body)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the file in the copy of "+cfgs[i].NodeName, func() bool { return copyHolds(cfgs[i].DataDir, "maps/big.bin", data) })
	}
	if got := download(n1, "maps/big.bin"); got.Status != http.StatusOK || !bytes.Equal(got.Body, data) {
		t.Fatalf("download: %d, %d bytes", got.Status, len(got.Body))
	}
}
