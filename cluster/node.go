// Package cluster runs several relay nodes as one service on NATS.
//
// A [Node] is this relay's place in the cluster: its connection to NATS
// (an embedded NATS server that forms a cluster with its peers' through
// routes, or an existing NATS system), and JetStream for what must be
// kept. On it the package builds the world registry with hosting leases
// ([Registry]: every world has one host node at a time, recorded in a
// JetStream key-value bucket) and the forwarding of calls to a world's
// host over NATS request/reply (forward.go: unary calls, file downloads
// and uploads), and the cluster's status (status.go: GET /cluster). The shared keys, tickets and
// rate limits (cluster/shared) and the events across nodes
// (cluster/eventbus) use the same Node through [Node.Conn] and
// [Node.JetStream].
//
// A relay started without cluster flags makes no Node at all and runs
// exactly as a relay alone.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Node is this relay's membership of a cluster: its NATS connection and
// JetStream context, and, when it runs one, its embedded NATS server.
type Node struct {
	cfg Config
	log *slog.Logger
	// srv is the embedded NATS server; nil with --nats. token locks its
	// client port.
	srv   *natsserver.Server
	token string
	nc    *nats.Conn
	js    jetstream.JetStream
	// size is the number of nodes the configuration names (embedded),
	// or the number of NATS servers known (--nats).
	size     int
	replicas int
	// signer signs the calls this node sends the others and checks those
	// it answers (sign.go).
	signer *signer
	// answers takes the signed answers to the requests this node sends
	// the others (answers.go).
	answers answers

	closeOnce sync.Once
	closers   []func()
	mu        sync.Mutex
}

// Start joins the cluster cfg describes: it starts the embedded NATS
// server (or connects to the existing NATS system) and returns once
// JetStream answers, or fails after cfg.StartTimeout. cfg must have passed
// [Config.Check].
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Node, error) {
	if !cfg.Enabled() {
		return nil, errors.New("cluster: the configuration asks for no cluster")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, log: log.With("node", cfg.NodeName), signer: newSigner(cfg.ClusterSecret)}
	var err error
	if cfg.Embedded() {
		err = n.startEmbedded()
	} else {
		err = n.connectExternal()
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	n.replicas = cfg.Replicas
	if n.replicas == 0 {
		n.replicas = min(3, max(1, n.size))
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		n.Close()
		return nil, fmt.Errorf("cluster: JetStream: %w", err)
	}
	// JetStream answers once its meta group has a leader, which in a new
	// cluster takes a few seconds: wait for it, within the start time-out.
	wait, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	for {
		// Each attempt has a short time-out of its own: a request sent
		// before the meta leader is known may go unanswered.
		attempt, cancelAttempt := context.WithTimeout(wait, 500*time.Millisecond)
		_, err = n.js.AccountInfo(attempt)
		cancelAttempt()
		if err == nil {
			break
		}
		select {
		case <-wait.Done():
			n.Close()
			return nil, fmt.Errorf("cluster: JetStream did not become ready within %v: %w", cfg.StartTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !n.signer.enabled() && !cfg.Embedded() {
		n.log.Warn("no --cluster-secret: calls between nodes are not signed, so any client of the NATS account can make a node act for any caller; give the relays an account of their own, and a cluster secret")
	}
	n.log.Info("joined the cluster", "embedded", cfg.Embedded(), "nodes", n.size, "replicas", n.replicas, "signed", n.signer.enabled())
	return n, nil
}

// startEmbedded starts the NATS server in process, with JetStream in
// <data>/nats and routes to the peers, and connects to it in process.
func (n *Node) startEmbedded() error {
	host, portText, _ := net.SplitHostPort(n.cfg.ClusterListen)
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("--cluster-listen: bad port %q", portText)
	}
	var routes []*url.URL
	for _, p := range n.cfg.ClusterPeers {
		if p == n.cfg.ClusterListen {
			continue
		}
		u := &url.URL{Scheme: "nats-route", Host: p}
		if n.cfg.ClusterSecret != "" {
			u.User = url.UserPassword(routeUser, n.cfg.ClusterSecret)
		}
		routes = append(routes, u)
	}
	n.size = 1 + len(routes)
	storeDir := filepath.Join(n.cfg.DataDir, "nats")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return fmt.Errorf("cluster: create %s: %w", storeDir, err)
	}
	// The relay talks to its own server in process. The server still
	// opens a client port (without one it starts no routes), on loopback
	// and a random port, locked with a token only this process knows:
	// a call that arrives over NATS is trusted with its caller's
	// identity, so no one else may publish.
	token := rand.Text()
	n.token = token
	opts := &natsserver.Options{
		ServerName:    n.cfg.NodeName,
		Host:          "127.0.0.1",
		Port:          natsserver.RANDOM_PORT,
		Authorization: token,
		JetStream:     true,
		StoreDir:      storeDir,
		NoSigs:        true,
		// Forwarded calls carry whole requests and answers: room for a
		// request of the largest body (--max-body-bytes) and a large
		// document.
		MaxPayload: maxPayload,
		Routes:     routes,
	}
	// A node without peers runs JetStream alone: JetStream refuses to
	// start clustered without routes.
	if len(routes) > 0 {
		opts.Cluster = natsserver.ClusterOpts{
			Name: n.cfg.ClusterName,
			Host: host,
			Port: port,
			// With a secret, only nodes that know it may join.
			Username: secretUser(n.cfg.ClusterSecret),
			Password: n.cfg.ClusterSecret,
		}
		if n.cfg.ClusterSecret != "" {
			// The relay checks the secret itself, to limit wrong ones
			// per address.
			opts.CustomRouterAuthentication = newRouteAuth(routeUser, n.cfg.ClusterSecret, n.log)
		}
		if n.cfg.ClusterTLSCert != "" {
			tc, err := routeTLSConfig(n.cfg)
			if err != nil {
				return err
			}
			opts.Cluster.TLSConfig = tc
			// A loaded machine may take a while to complete a handshake:
			// the server's default of two seconds would drop good peers.
			opts.Cluster.TLSTimeout = routeTLSTimeout.Seconds()
		}
	}
	if n.cfg.ClusterSecret == "" && !loopback(host) {
		n.log.Warn("the cluster's route port is open to the network without --cluster-secret: any host that reaches it can join the cluster and act for any caller", "addr", n.cfg.ClusterListen)
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return fmt.Errorf("cluster: embedded NATS server: %w", err)
	}
	srv.SetLoggerV2(natsLogger{n.log}, false, false, false)
	srv.Start()
	n.srv = srv
	if !srv.ReadyForConnections(n.cfg.StartTimeout) {
		return fmt.Errorf("cluster: the embedded NATS server did not start within %v (is %s free?)", n.cfg.StartTimeout, n.cfg.ClusterListen)
	}
	n.nc, err = nats.Connect("", nats.InProcessServer(srv), nats.Token(token), nats.Name("relay "+n.cfg.NodeName), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("cluster: connect to the embedded NATS server: %w", err)
	}
	return nil
}

// routeTLSTimeout bounds a route's TLS handshake.
const routeTLSTimeout = 10 * time.Second

// routeTLSConfig is the mutual TLS of the routes between embedded NATS
// servers: the node presents its certificate when it accepts a route and
// when it opens one, and both ends require a peer certificate signed by
// --cluster-tls-ca. The server checks a solicited peer's certificate
// against the host of its --cluster-peers address, so each certificate
// must name its node's host or IP address.
func routeTLSConfig(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.ClusterTLSCert, cfg.ClusterTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--cluster-tls-cert/--cluster-tls-key: %w", err)
	}
	pem, err := os.ReadFile(cfg.ClusterTLSCA)
	if err != nil {
		return nil, fmt.Errorf("--cluster-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cluster-tls-ca: %s holds no PEM certificate", cfg.ClusterTLSCA)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// loopback reports whether a listen host is a loopback address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxPayload is the embedded NATS server's largest message.
const maxPayload = 8 << 20

// routeUser is the user name of the routes between nodes that share a
// cluster secret.
const routeUser = "relay"

// secretUser is the route user for a secret: none without one.
func secretUser(secret string) string {
	if secret == "" {
		return ""
	}
	return routeUser
}

// connectExternal connects to an existing NATS system (--nats), with its
// credentials and TLS settings.
func (n *Node) connectExternal() error {
	opts := []nats.Option{
		nats.Name("relay " + n.cfg.NodeName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.Timeout(10 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			n.log.Warn("disconnected from NATS", "error", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { n.log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
	}
	if n.cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(n.cfg.NATSCreds))
	}
	if n.cfg.NATSTLSCA != "" || n.cfg.NATSTLSCert != "" {
		tc, err := n.tlsConfig()
		if err != nil {
			return err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(n.cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("cluster: connect to NATS at %s: %w", redact(n.cfg.NATSURL), err)
	}
	n.nc = nc
	n.size = len(nc.Servers())
	return nil
}

// tlsConfig builds the client TLS settings of --nats-tls-*.
func (n *Node) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if n.cfg.NATSTLSCA != "" {
		pem, err := os.ReadFile(n.cfg.NATSTLSCA)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--nats-tls-ca: %s holds no PEM certificate", n.cfg.NATSTLSCA)
		}
		tc.RootCAs = pool
	}
	if n.cfg.NATSTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(n.cfg.NATSTLSCert, n.cfg.NATSTLSKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-cert/--nats-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// redact removes the user information from NATS URLs, for messages.
func redact(urls string) string {
	var out []string
	for u := range strings.SplitSeq(urls, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			p.User = url.User("redacted")
			u = p.String()
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
}

// Conn returns the node's NATS connection. It stays the same for the
// node's life; the caller must not close it.
func (n *Node) Conn() *nats.Conn { return n.nc }

// JetStream returns the node's JetStream context, ready when Start
// returned.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// Name is the node's name in the cluster.
func (n *Node) Name() string { return n.cfg.NodeName }

// Replicas is how many copies JetStream keeps of what the cluster shares:
// what buckets and streams of the shared state should be created with.
func (n *Node) Replicas() int { return n.replicas }

// Config is the node's configuration, with its defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// OnClose registers fn to run when the node closes, before its NATS
// connection does; the last registered runs first.
func (n *Node) OnClose(fn func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closers = append(n.closers, fn)
}

// Close leaves the cluster: it runs the OnClose functions, drains the NATS
// connection and stops the embedded server. Later calls do nothing.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		closers := n.closers
		n.mu.Unlock()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		if n.nc != nil {
			n.nc.Close()
		}
		if n.srv != nil {
			n.srv.Shutdown()
			n.srv.WaitForShutdown()
		}
	})
}

// natsLogger writes the embedded NATS server's log lines to the relay's
// log. Its notices (many lines at start) are debug lines here.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) {
	l.log.Debug("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Warnf(format string, v ...any) { l.log.Warn("nats: " + fmt.Sprintf(format, v...)) }
func (l natsLogger) Fatalf(format string, v ...any) {
	l.log.Error("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Errorf(format string, v ...any) {
	l.log.Error("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Debugf(format string, v ...any) {
	l.log.Debug("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Tracef(format string, v ...any) {
	l.log.Debug("nats: " + fmt.Sprintf(format, v...))
}
