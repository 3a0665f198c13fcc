package main

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// TestLinkedLargeFileRoundTrip: a file of several megabytes (its messages
// on the link span several of the relay's 1 MiB pieces) uploaded over
// REST to the embedded demo world and to a copy linked through the
// simulator comes back the same from both, with the same answers.
func TestLinkedLargeFileRoundTrip(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	content := make([]byte, 3<<20+17)
	_, _ = rand.Read(content)
	for _, clientID := range []string{demo.ClientID, linked} {
		before := tr.Links().Hub().Stats().Replies
		body, ct := multipartBody(t, [][2]string{{"path", "uploads/big"}, {"clientId", clientID}}, "big.bin", content)
		resp := tr.send(http.MethodPost, "/upload", tr.AdminKey, nil, body, ct)
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: upload: %d %s", clientID, resp.Status, resp.Body)
		}
		if d := resp.Data(t); d["path"] != "uploads/big/big.bin" || d["size"] != float64(len(content)) {
			t.Fatalf("%s: upload: %s", clientID, resp.Body)
		}
		got := tr.Do(http.MethodGet, "/download", tr.AdminKey, relaytest.Q("clientId", clientID, "path", "uploads/big/big.bin"), nil)
		if got.Status != http.StatusOK || !bytes.Equal(got.Body, content) {
			t.Fatalf("%s: download: %d, %d bytes, equal %v", clientID, got.Status, len(got.Body), bytes.Equal(got.Body, content))
		}
		if replies := tr.Links().Hub().Stats().Replies - before; (clientID == linked) != (replies >= 2) {
			t.Fatalf("%s: %d replies from the tabletop", clientID, replies)
		}
	}
}
