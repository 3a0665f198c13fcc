package cluster_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestClusterFaults stops and restarts nodes of a three-node cluster in a
// loop while writers update documents of the worlds on every node through
// random nodes, then checks that every acknowledged write is there. It
// runs only with RELAY_CLUSTER_FAULTS set (RELAY_CLUSTER_FAULTS=20 for
// twenty rounds; 5 by default): a minute or more.
func TestClusterFaults(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("RELAY_CLUSTER_FAULTS"))
	if os.Getenv("RELAY_CLUSTER_FAULTS") == "" {
		t.Skip("set RELAY_CLUSTER_FAULTS to run the fault loop")
	}
	if rounds <= 0 {
		rounds = 5
	}
	nodes, cfgs := startCluster(t)
	keys := []string{nodes[0].AdminKey, nodes[1].AdminKey, nodes[2].AdminKey}
	var mu sync.Mutex
	up := []bool{true, true, true}
	pick := func() (*relaytest.Relay, string) {
		mu.Lock()
		defer mu.Unlock()
		for {
			i := rand.IntN(3)
			if up[i] {
				return nodes[i], keys[i]
			}
		}
	}
	type target struct{ world, uuid string }
	targets := []target{{"west", relaytest.AriaUUID}, {"west", relaytest.BromUUID}, {"demo", relaytest.MaraUUID}, {"demo", relaytest.GuardUUID}}
	acked := make([]atomic.Int64, len(targets))
	var ok, failed atomic.Int64
	client := &http.Client{Timeout: 10 * time.Second}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w, tg := range targets {
		writers.Go(func() {
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				n, key := pick()
				// Not n.Do, which fails the test when a stopping node
				// drops the connection: here that is a failed write.
				body := fmt.Sprintf(`{"data":{"name":"w%d-%d"}}`, w, seq)
				req, _ := http.NewRequest(http.MethodPut, n.Base+"/update?"+relaytest.Q("clientId", tg.world, "uuid", tg.uuid).Encode(), strings.NewReader(body))
				req.Header.Set("x-api-key", key)
				req.Header.Set("Content-Type", "application/json")
				status := 0
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				if status == http.StatusOK {
					acked[w].Store(seq)
					ok.Add(1)
				} else {
					failed.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for r := range rounds {
		i := r % 3
		time.Sleep(time.Second)
		mu.Lock()
		up[i] = false
		mu.Unlock()
		stopAll([]*relaytest.Relay{nodes[i]})
		time.Sleep(500 * time.Millisecond)
		back := clusterNode(t, cfgs[i], i == 0)
		mu.Lock()
		nodes[i], up[i] = back, true
		mu.Unlock()
	}
	time.Sleep(time.Second)
	close(stop)
	writers.Wait()
	t.Cleanup(func() { stopAll(nodes) })
	t.Logf("%d rounds: %d writes acknowledged, %d refused or failed", rounds, ok.Load(), failed.Load())
	for w, tg := range targets {
		var got relaytest.Response
		waitUntil(t, "the world "+tg.world+" served again", func() bool {
			got = nodes[0].Do(http.MethodGet, "/get", keys[0], relaytest.Q("clientId", tg.world, "uuid", tg.uuid), nil)
			return got.Status == http.StatusOK
		})
		name, _ := got.Data(t)["name"].(string)
		seq, err := strconv.ParseInt(strings.TrimPrefix(name, fmt.Sprintf("w%d-", w)), 10, 64)
		if err != nil || seq < acked[w].Load() {
			t.Errorf("%s %s: name %q, but write %d was acknowledged", tg.world, tg.uuid, name, acked[w].Load())
		}
	}
}
