package cluster_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/tabletop-relay/relay/cluster/clustertest"
)

// TestRequestsMakeNoJetStreamRequests checks that calls served by the node
// that hosts their world cost the cluster nothing per call: no bucket
// listed, no consumer created, no entry read. It counts the JetStream API
// requests the node's server answers while it serves many reads and
// writes that name no world (so the relay looks for the only world, which
// lists the linked worlds too), and allows only the few that the node's
// background work (leases, watchers) makes meanwhile.
func TestRequestsMakeNoJetStreamRequests(t *testing.T) {
	t.Parallel()
	cfgs := clustertest.Configs(t, 1, clusterLease)
	r := clusterNode(t, cfgs[0], true)
	get := url.Values{"uuid": {"Actor.ariaVale00000001"}}
	update := url.Values{"uuid": {"Actor.bromIronfist0001"}}
	call := func(i int) {
		if resp := r.Do(http.MethodGet, "/get", r.AdminKey, get, nil); resp.Status != http.StatusOK {
			t.Fatalf("GET /get: %d %s", resp.Status, resp.Body)
		}
		body := `{"data":{"system.attributes.hp.value":` + strconv.Itoa(10+i%5) + `}}`
		if resp := r.Do(http.MethodPut, "/update", r.AdminKey, update, body); resp.Status != http.StatusOK {
			t.Fatalf("PUT /update: %d %s", resp.Status, resp.Body)
		}
	}
	// The first calls may warm caches.
	for i := range 5 {
		call(i)
	}
	const calls = 100
	before := r.Registry().JetStreamAPIRequests()
	for i := range calls {
		call(i)
	}
	made := r.Registry().JetStreamAPIRequests() - before
	if made > calls/10 {
		t.Fatalf("%d calls made %d JetStream API requests; want none per call (at most %d in the background)", 2*calls, made, calls/10)
	}
	t.Logf("%d calls, %d JetStream API requests meanwhile", 2*calls, made)
}
