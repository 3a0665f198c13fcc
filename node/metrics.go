package node

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/server"
)

// serveMetrics serves the metrics at /metrics on their own listener (see
// Config.MetricsListen), apart from the API: they need no key there, so the
// address belongs on a private network, as a Prometheus scraper's usually
// is. It returns the address it listens on and a function that stops the
// server.
func serveMetrics(ln net.Listener, m *observe.Metrics, log *slog.Logger) (bound string, stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics listening", "addr", ln.Addr().String(), "path", "/metrics")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

// registerMetrics adds the gauges and counters that are read from the
// relay's parts at each scrape: nothing is counted for them on the
// request paths beyond the atomic counters the parts keep anyway.
func (r *Node) registerMetrics(build gateway.BuildInfo, rateLimit, authFailures, pairAttempts, pairFailures, requestAttempts, requestPolls *server.RateLimiter) {
	m := r.metrics
	// The build, as Prometheus exporters name theirs: always 1, with the
	// version, commit and commit time as labels, so that a dashboard can
	// show which build each relay runs and when that changed.
	m.GaugeFunc("relay_build_info", "The relay's build: always 1, labelled with its version, commit, commit time and Go version.", prometheus.Labels{
		"version": build.Version, "commit": build.Commit, "date": build.Date, "goversion": runtime.Version(),
	}, func() float64 { return 1 })
	m.GaugeFunc("relay_worlds", "Worlds the relay serves from its data directory.", nil, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ids, err := r.worlds.IDs(ctx)
		if err != nil {
			return 0
		}
		return float64(len(ids))
	})
	m.GaugeFunc("relay_event_streams_open", "Event subscriptions open on the relay's worlds (each SSE or gRPC event stream holds one).", nil, func() float64 {
		return float64(r.hub.Stats().Open)
	})
	m.CounterFunc("relay_events_delivered_total", "Live events queued for event streams (one per stream that receives it).", nil, func() float64 {
		return float64(r.hub.Stats().Delivered)
	})
	m.CounterFunc("relay_event_streams_dropped_total", "Event streams closed with an overflow event because they fell too far behind (their waiting events dropped).", nil, func() float64 {
		return float64(r.hub.Stats().Overflowed)
	})
	for _, l := range []struct {
		name string
		l    *server.RateLimiter
	}{{"key", rateLimit}, {"auth_failures", authFailures}, {"pairing", pairAttempts}, {"pairing_failures", pairFailures}, {"requests", requestAttempts}, {"request_polls", requestPolls}} {
		m.CounterFunc("relay_rate_limit_refusals_total", "Requests refused with 429 by a rate limit: key (--rate-limit, per API key), auth_failures (--auth-failure-limit, per address), pairing (--pair-rate-limit, per address), pairing_failures (--pair-failure-limit, relay-wide), requests (--request-rate-limit, per address), request_polls (--request-poll-limit, per address).",
			prometheus.Labels{"limit": l.name}, func() float64 { return float64(l.l.Refused()) })
	}
	hub := r.links.Hub()
	for _, c := range []struct {
		name, help string
		get        func(link.EventStats) uint64
	}{
		{"relay_linked_events_withheld_total", "Deliveries of linked worlds' events withheld from a subscriber who is not a GM because the relay could not tell whether they may read the document.",
			func(s link.EventStats) uint64 { return s.Undecided }},
		{"relay_linked_event_lookups_total", "Documents the relay asked a linked world for to decide who may read its events, or to complete its combat events.",
			func(s link.EventStats) uint64 { return s.Fetched }},
		{"relay_linked_events_dropped_total", "Event messages of linked worlds dropped because too many waited to be processed (4096, or 32 MiB while the relay waited for the world itself).",
			func(s link.EventStats) uint64 { return s.Dropped }},
		{"relay_linked_events_oversized_total", "Event messages of linked worlds dropped because they were larger than --link-max-event-bytes or nested deeper than --max-json-depth allows.",
			func(s link.EventStats) uint64 { return s.Oversized }},
		{"relay_linked_event_journal_errors_total", "Failures to store linked worlds' events in relay.db for resumes across restarts, or to load them.",
			func(s link.EventStats) uint64 { return s.JournalErrors }},
	} {
		m.CounterFunc(c.name, c.help, nil, func() float64 { return float64(c.get(r.linkEvents.Stats())) })
	}
	m.GaugeFunc("relay_linked_worlds_connected", "Linked worlds (tabletops) connected to /relay.", nil, func() float64 {
		return float64(hub.Stats().Connected)
	})
	m.GaugeFunc("relay_linked_requests_pending", "Requests sent to linked worlds that wait for their reply.", nil, func() float64 {
		return float64(hub.Stats().Pending)
	})
	for _, c := range []struct {
		outcome string
		get     func(link.Stats) uint64
	}{
		{"sent", func(s link.Stats) uint64 { return s.Calls }},
		{"replied", func(s link.Stats) uint64 { return s.Replies }},
		{"timeout", func(s link.Stats) uint64 { return s.Timeouts }},
		{"failed", func(s link.Stats) uint64 { return s.Failed }},
		{"refused", func(s link.Stats) uint64 { return s.RefusedReplies }},
	} {
		m.CounterFunc("relay_linked_requests_total", "Requests to linked worlds: sent (every one), replied in time, timed out, failed (closed or full connection), refused (a reply over --link-max-reply-bytes or too deeply nested).",
			prometheus.Labels{"outcome": c.outcome}, func() float64 { return float64(c.get(hub.Stats())) })
	}
	m.CounterFunc("relay_linked_late_replies_total", "Replies from linked worlds that matched no waiting request (they came after their request timed out or was cancelled, or carried an id the relay never sent) and were dropped.",
		nil, func() float64 { return float64(hub.Stats().LateReplies) })
	m.GaugeFunc("relay_connections_open", "TCP connections open on the API's address.", nil, func() float64 {
		return float64(r.conns.Stats().Open)
	})
	m.CounterFunc("relay_connection_refusals_total", "Connections refused with 503 by a connection cap: overall (--max-conns) or per_ip (--max-conns-per-ip).",
		prometheus.Labels{"cap": "overall"}, func() float64 { return float64(r.conns.Stats().RefusedOverall) })
	m.CounterFunc("relay_connection_refusals_total", "Connections refused with 503 by a connection cap: overall (--max-conns) or per_ip (--max-conns-per-ip).",
		prometheus.Labels{"cap": "per_ip"}, func() float64 { return float64(r.conns.Stats().RefusedPerIP) })
	// Registered on a relay alone too (always 0 there), so that every
	// relay serves the same metrics.
	refused := func() (records, pings, calls, answers int64) {
		if r.cluster == nil {
			return 0, 0, 0, 0
		}
		records, pings, calls = r.cluster.Refused()
		return records, pings, calls, r.cluster.RefusedAnswers()
	}
	for _, c := range []struct {
		kind string
		get  func(records, pings, calls, answers int64) int64
	}{
		{"world_record", func(records, _, _, _ int64) int64 { return records }},
		{"ping", func(_, pings, _, _ int64) int64 { return pings }},
		{"call", func(_, _, calls, _ int64) int64 { return calls }},
		{"answer", func(_, _, _, answers int64) int64 { return answers }},
	} {
		m.CounterFunc("relay_cluster_unsigned_messages_total", "Messages between nodes refused for want of a valid cluster signature (with a cluster secret): world_record (records of a replicated world's log, skipped by its followers), ping (liveness pings), call (forwarded calls, streams, uploads and questions about a world's users), answer (answers to these and to pings, and the messages and acknowledgements of forwarded downloads and uploads: forged, replayed or out of order, dropped).",
			prometheus.Labels{"kind": c.kind}, func() float64 { return float64(c.get(refused())) })
	}
	m.CounterFunc("relay_slow_bodies_cut_total", "Request bodies cut off for arriving slower than --body-min-rate allows, their connections closed.", nil, func() float64 {
		return float64(r.bodies.TimedOut())
	})
}

// linkRoute labels the tabletop module's endpoints for the access line and
// metrics: their own path, or the pattern of the one that carries a client
// id.
func linkRoute(path string) string {
	if !link.Owns(path) {
		return ""
	}
	if route, ok := link.RequestRoute(path); ok {
		return route
	}
	if strings.HasPrefix(path, "/api/clients/") {
		return "/api/clients/{clientId}/active"
	}
	return strings.TrimSuffix(path, "/")
}
