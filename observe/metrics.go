package observe

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
)

// Metrics holds the relay's Prometheus metrics in a registry of its own
// (not the package's global one, so that several relays in one process, as
// in the tests, each count their own). A nil *Metrics records nothing.
//
// The per-request paths (ObserveHTTP, ObserveRPC, ObserveCommit) look up
// their series in maps keyed by values that need no allocation (the route
// label, a method index and the status as an integer) and resolve each
// label combination with the vectors only the first time it is seen: after
// that a request costs two read-locked map lookups and two atomic updates.
type Metrics struct {
	reg *prometheus.Registry

	requests *prometheus.CounterVec   // route, method, status
	latency  *prometheus.HistogramVec // route, method
	rpcs     *prometheus.CounterVec   // method, code
	rpcTime  *prometheus.HistogramVec // method
	commit   prometheus.Histogram
	txns     prometheus.Counter

	mu     sync.RWMutex
	routes map[string]*routeSeries
	rpcMu  sync.RWMutex
	rpcSet map[string]*rpcSeries
}

// routeSeries are one route's resolved series.
type routeSeries struct {
	mu       sync.RWMutex
	counters map[uint32]prometheus.Counter // by methodIndex<<16 | status
	latency  [len(httpMethods) + 1]prometheus.Observer
}

// rpcSeries are one gRPC method's resolved series.
type rpcSeries struct {
	mu      sync.RWMutex
	codes   [17]prometheus.Counter // by gRPC code; codes past 16 count as Unknown
	latency prometheus.Observer
}

// httpMethods are the methods with a label of their own; any other is
// counted as "other".
var httpMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

func methodIndex(m string) (int, string) {
	for i, v := range httpMethods {
		if v == m {
			return i, v
		}
	}
	return len(httpMethods), "other"
}

// NewMetrics makes the relay's metrics with the Go runtime's and the
// process's own collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		routes: map[string]*routeSeries{},
		rpcSet: map[string]*rpcSeries{},
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_http_requests_total",
		Help: "HTTP requests (REST, event streams, files, console, tabletop endpoints) by route pattern, method and status, refusals included.",
	}, []string{"route", "method", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "relay_http_request_duration_seconds",
		Help:    "Time from an HTTP request's arrival to the end of its answer, by route pattern and method (an event stream's whole life).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route", "method"})
	m.rpcs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_grpc_requests_total",
		Help: "gRPC-native calls by full method and status code (REST calls are counted as HTTP requests only).",
	}, []string{"method", "code"})
	m.rpcTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "relay_grpc_request_duration_seconds",
		Help:    "Time of a gRPC-native call, by full method (a stream's whole life).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"method"})
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "relay_db_commit_duration_seconds",
		Help:    "Time of a world's group commit: one SQLite transaction and its fsync, for every write transaction waiting.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	m.txns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relay_db_committed_transactions_total",
		Help: "Write transactions the group commits carried (divided by relay_db_commit_duration_seconds_count: transactions per commit).",
	})
	m.reg.MustRegister(m.requests, m.latency, m.rpcs, m.rpcTime, m.commit, m.txns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// GaugeFunc registers a gauge read from f at each scrape: f must be safe
// for concurrent use and cheap.
func (m *Metrics) GaugeFunc(name, help string, labels prometheus.Labels, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// CounterFunc registers a counter read from f at each scrape; f must only
// ever grow.
func (m *Metrics) CounterFunc(name, help string, labels prometheus.Labels, f func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

// ObserveHTTP counts a finished HTTP request and its duration.
func (m *Metrics) ObserveHTTP(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	rs := m.route(route)
	mi, mname := methodIndex(method)
	key := uint32(mi)<<16 | uint32(status&0xffff)
	rs.mu.RLock()
	c, h := rs.counters[key], rs.latency[mi]
	rs.mu.RUnlock()
	if c == nil || h == nil {
		rs.mu.Lock()
		if c = rs.counters[key]; c == nil {
			c = m.requests.WithLabelValues(route, mname, strconv.Itoa(status))
			rs.counters[key] = c
		}
		if h = rs.latency[mi]; h == nil {
			h = m.latency.WithLabelValues(route, mname)
			rs.latency[mi] = h
		}
		rs.mu.Unlock()
	}
	c.Inc()
	h.Observe(d.Seconds())
}

// route returns the route's series, made on first use.
func (m *Metrics) route(route string) *routeSeries {
	m.mu.RLock()
	rs := m.routes[route]
	m.mu.RUnlock()
	if rs != nil {
		return rs
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs = m.routes[route]; rs == nil {
		rs = &routeSeries{counters: map[uint32]prometheus.Counter{}}
		m.routes[route] = rs
	}
	return rs
}

// ObserveRPC counts a finished gRPC-native call and its duration.
func (m *Metrics) ObserveRPC(method string, code codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	if code > 16 {
		code = codes.Unknown
	}
	m.rpcMu.RLock()
	rs := m.rpcSet[method]
	m.rpcMu.RUnlock()
	if rs == nil {
		m.rpcMu.Lock()
		if rs = m.rpcSet[method]; rs == nil {
			rs = &rpcSeries{latency: m.rpcTime.WithLabelValues(method)}
			m.rpcSet[method] = rs
		}
		m.rpcMu.Unlock()
	}
	rs.mu.RLock()
	c := rs.codes[code]
	rs.mu.RUnlock()
	if c == nil {
		rs.mu.Lock()
		if c = rs.codes[code]; c == nil {
			c = m.rpcs.WithLabelValues(method, code.String())
			rs.codes[code] = c
		}
		rs.mu.Unlock()
	}
	c.Inc()
	rs.latency.Observe(d.Seconds())
}

// ObserveCommit records a world's group commit: how long its write took and
// how many transactions it carried. It has world.Options.ObserveCommit's
// signature.
func (m *Metrics) ObserveCommit(d time.Duration, transactions int) {
	if m == nil {
		return
	}
	m.commit.Observe(d.Seconds())
	m.txns.Add(float64(transactions))
}
