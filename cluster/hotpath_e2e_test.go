package cluster_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/clustertest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestRequestsMakeNoJetStreamRequests checks that calls served by the node
// that hosts their world cost the cluster nothing per call: no bucket
// listed, no consumer created, no entry read. It counts the JetStream API
// requests the node's server answers while it serves many reads and
// writes that name no world (so the relay looks for the only world, which
// lists the linked worlds too), and allows only the few that the node's
// background work (leases, watchers) and the calls' once-a-second read of
// their account's limits make meanwhile.
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
	// The calls go in batches, and the batch with the fewest requests
	// beyond the background counts. A call that made a JetStream request
	// would show in every batch. The background is the node's work
	// (a renewal tried again, a watcher replaced after a stall of a loaded
	// machine), which comes now and then, and the account limits that the
	// calls read at most once a second (limitsTTL in package server),
	// which grow with the time the calls take: a loaded machine takes
	// longer, and reads them more often.
	const batches, perBatch = 5, 20
	fewest := int64(perBatch)
	var counts []string
	for b := range batches {
		before := r.Registry().JetStreamAPIRequests()
		began := time.Now()
		for i := range perBatch {
			call(b*perBatch + i)
		}
		made := int64(r.Registry().JetStreamAPIRequests() - before)
		took := time.Since(began)
		fewest = min(fewest, made-int64(took/time.Second)-1)
		counts = append(counts, fmt.Sprintf("%d in %v", made, took.Round(time.Millisecond)))
	}
	if fewest > perBatch/4 {
		t.Fatalf("every batch of %d calls made JetStream API requests beyond one a second (%s); want none per call (at most %d more in the background)", 2*perBatch, strings.Join(counts, ", "), perBatch/4)
	}
	t.Logf("JetStream API requests in batches of %d calls: %s", 2*perBatch, strings.Join(counts, ", "))
}

// BenchmarkLocalCall compares a call served by the node that hosts its
// world with clustering off and in a cluster of one: GET /get (33 KB) and
// PUT /update, from parallel clients over keep-alive HTTP/1.1. Both relays
// run in this process, so ns/op covers the relay, the client and, in the
// cluster, the embedded NATS server. js-api/op is the JetStream API
// requests per call, which must stay 0.
func BenchmarkLocalCall(b *testing.B) {
	for _, clustered := range []bool{false, true} {
		name := "lone"
		if clustered {
			name = "cluster-of-one"
		}
		r := relaytest.StartLogged(b, slog.New(slog.DiscardHandler), func(c *node.Config) {
			if clustered {
				c.Cluster = clustertest.Configs(b, 1, clusterLease)[0]
			}
		})
		apiRequests := func() uint64 {
			if !clustered {
				return 0
			}
			return r.Registry().JetStreamAPIRequests()
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
		for _, op := range []struct{ name, method, path, body string }{
			{"get", http.MethodGet, "/get?uuid=Actor.ariaVale00000001", ""},
			{"update", http.MethodPut, "/update?uuid=Actor.bromIronfist0001", `{"data":{"system.attributes.hp.value":%d}}`},
		} {
			b.Run(name+"/"+op.name, func(b *testing.B) {
				b.ReportAllocs()
				var seq atomic.Int64
				before := apiRequests()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						var body io.Reader
						if op.body != "" {
							body = strings.NewReader(fmt.Sprintf(op.body, 10+seq.Add(1)%5))
						}
						req, _ := http.NewRequest(op.method, r.Base+op.path, body)
						req.Header.Set("x-api-key", r.AdminKey)
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							b.Errorf("%s %s: %d", op.method, op.path, resp.StatusCode)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(apiRequests()-before)/float64(b.N), "js-api/op")
			})
		}
	}
}
