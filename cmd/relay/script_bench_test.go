package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// BenchmarkExecuteJS is the latency of POST /execute-js, one request at a
// time: a script that only returns, and one that reads a document through
// game.get (one world call); "spaced" requests leave the relay 20 ms
// between them (not timed), as an occasional caller would, and
// "back-to-back" ones none.
func BenchmarkExecuteJS(b *testing.B) {
	for _, bc := range []struct{ name, src string }{
		{"return", `return 1`},
		{"game.get", `const a = await game.get("` + relaytest.AriaUUID + `"); return a.name`},
	} {
		for _, spacing := range []time.Duration{20 * time.Millisecond, 0} {
			name := bc.name + "/back-to-back"
			if spacing > 0 {
				name = bc.name + "/spaced"
			}
			b.Run(name, func(b *testing.B) {
				r, key := benchRelay(b)
				c := benchClient()
				url := fmt.Sprintf("http://%s/execute-js", r.Addr())
				body, _ := json.Marshal(map[string]string{"script": bc.src})
				for b.Loop() {
					if spacing > 0 {
						b.StopTimer()
						time.Sleep(spacing)
						b.StartTimer()
					}
					req, _ := http.NewRequest(http.MethodPost, url, nil)
					req.Header.Set("x-api-key", key)
					req.Header.Set("Content-Type", "application/json")
					doBench(b, c, req, body)
				}
			})
		}
	}
}
