package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// Config is how a relay node joins a cluster. The zero Config is a relay
// alone: no NATS at all ([Config.Enabled] is false).
type Config struct {
	// NodeName names this node in the cluster; it must be unique and
	// stay the same across restarts, since the node's world leases carry
	// it. The host name when empty (--node-name).
	NodeName string
	// DataDir is the relay's data directory: an embedded NATS server keeps
	// its JetStream files in <DataDir>/nats.
	DataDir string

	// ClusterListen is the host:port where the embedded NATS server
	// accepts its peers' routes (--cluster-listen).
	ClusterListen string
	// ClusterPeers are the other nodes' ClusterListen addresses
	// (--cluster-peers); this node's own address may be among them.
	ClusterPeers []string
	// ClusterSecret, when set, is the password every node of the cluster
	// must present on its routes; a node without it cannot join
	// (--cluster-secret). Routes are not encrypted: keep the route ports
	// on a private network.
	ClusterSecret string
	// ClusterSecretFile, when set, is a file holding ClusterSecret (its
	// surrounding white space ignored), read by Check
	// (--cluster-secret-file): unlike a flag, a file does not show in the
	// process list.
	ClusterSecretFile string
	// ClusterName is the NATS cluster's name; every node of a cluster
	// must use the same one ("relay" when empty).
	ClusterName string
	// ClusterInsecure lets a node whose route port is open beyond
	// loopback start without a cluster secret, on a network the operator
	// trusts (--cluster-insecure); without it such a node refuses to
	// start, since anyone who reaches the port could join and act for
	// any caller.
	ClusterInsecure bool
	// ClusterTLSCert, ClusterTLSKey and ClusterTLSCA are PEM files that
	// encrypt the routes between embedded NATS servers with mutual TLS:
	// this node's certificate and key, used both to accept and to open
	// routes, and the authorities that sign every node's certificate
	// (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca). A peer
	// without a certificate signed by ClusterTLSCA cannot join.
	ClusterTLSCert, ClusterTLSKey, ClusterTLSCA string

	// NATSURL connects to an existing NATS system instead of starting one
	// (--nats): one or more comma-separated nats:// or tls:// URLs.
	NATSURL string
	// NATSCreds is a NATS credentials file (--nats-creds).
	NATSCreds string
	// NATSTLSCA, NATSTLSCert and NATSTLSKey are PEM files: the
	// authorities that sign the NATS servers' certificates, and this
	// node's client certificate and key (--nats-tls-ca, --nats-tls-cert,
	// --nats-tls-key).
	NATSTLSCA, NATSTLSCert, NATSTLSKey string

	// Replicas is how many copies JetStream keeps of the shared state;
	// when 0, min(3, the cluster's size) (--cluster-replicas).
	Replicas int
	// LeaseTTL is how long a world's hosting lease lasts without being
	// renewed: how long a world stays unavailable after its host dies,
	// and how soon a cut-off node stops serving it (--cluster-lease).
	// DefaultLeaseTTL when 0.
	LeaseTTL time.Duration
	// ForwardTimeout bounds a call forwarded to another node when the
	// caller set no earlier deadline (--cluster-forward-timeout);
	// DefaultForwardTimeout when 0.
	ForwardTimeout time.Duration
	// WorldReplicas is how many other nodes keep a copy of each embedded
	// world, applying its replicated log, so that one of them can serve it
	// once its host is gone (--world-replicas; capped by the number of
	// nodes less one). 0 replicates nothing: a world is unavailable while
	// its host is down, as in a relay alone.
	WorldReplicas int
	// SnapshotRecords and SnapshotBytes decide when a replicated world's
	// copy is snapshotted into the object store, after which its log is
	// trimmed: once this many records, or this many bytes of records,
	// were applied since the world's newest snapshot
	// (--world-snapshot-records, --world-snapshot-mib).
	// DefaultSnapshotRecords and DefaultSnapshotBytes when 0.
	SnapshotRecords int
	SnapshotBytes   int64
	// StartTimeout bounds how long the node waits for NATS and JetStream
	// to be ready at start (DefaultStartTimeout when 0).
	StartTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultLeaseTTL       = 15 * time.Second
	DefaultForwardTimeout = 30 * time.Second
	DefaultWorldReplicas  = 2
	// DefaultSnapshotRecords and DefaultSnapshotBytes: a snapshot every
	// 10,000 records or 64 MiB of records, whichever comes first.
	DefaultSnapshotRecords       = 10000
	DefaultSnapshotBytes   int64 = 64 << 20
	DefaultStartTimeout          = 60 * time.Second
	DefaultClusterName           = "relay"
)

// MinClusterSecretBytes is the shortest cluster secret a node accepts:
// the route port answers anyone who reaches it, so the secret must be out
// of reach of guessing (`openssl rand -hex 32` prints 64 characters).
const MinClusterSecretBytes = 32

// maxClusterSecretFileBytes bounds the file read for the secret.
const maxClusterSecretFileBytes = 4 << 10

// Enabled reports whether the configuration asks for a cluster: an
// embedded NATS server with routes, or an existing NATS system. Without
// it the relay runs alone, with no NATS at all.
func (c Config) Enabled() bool {
	return c.ClusterListen != "" || len(c.ClusterPeers) > 0 || c.NATSURL != ""
}

// Embedded reports whether the node starts its own NATS server.
func (c Config) Embedded() bool { return c.Enabled() && c.NATSURL == "" }

// ParsePeers splits a comma-separated host:port list, dropping blanks.
func ParsePeers(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Check refuses configurations that cannot work, naming the flag at fault.
// It fills in the node name from the host name when it is empty.
func (c *Config) Check() error {
	if !c.Enabled() {
		for _, f := range []struct{ flag, v string }{{"nats-creds", c.NATSCreds}, {"nats-tls-ca", c.NATSTLSCA}, {"nats-tls-cert", c.NATSTLSCert}, {"nats-tls-key", c.NATSTLSKey}} {
			if f.v != "" {
				return fmt.Errorf("--%s needs --nats", f.flag)
			}
		}
		return nil
	}
	if c.NATSURL != "" && (c.ClusterListen != "" || len(c.ClusterPeers) > 0) {
		return errors.New("--nats connects to an existing NATS system: it cannot be combined with --cluster-listen or --cluster-peers")
	}
	if c.NATSURL == "" {
		for _, f := range []struct{ flag, v string }{{"nats-creds", c.NATSCreds}, {"nats-tls-ca", c.NATSTLSCA}, {"nats-tls-cert", c.NATSTLSCert}, {"nats-tls-key", c.NATSTLSKey}} {
			if f.v != "" {
				return fmt.Errorf("--%s needs --nats", f.flag)
			}
		}
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if err := c.readSecret(); err != nil {
		return err
	}
	if !c.Embedded() {
		for _, f := range []struct{ flag, v string }{{"cluster-tls-cert", c.ClusterTLSCert}, {"cluster-tls-key", c.ClusterTLSKey}, {"cluster-tls-ca", c.ClusterTLSCA}} {
			if f.v != "" {
				return fmt.Errorf("--%s secures the routes of the embedded NATS server: it needs --cluster-listen, not --nats (use --nats-tls-* for an existing NATS system)", f.flag)
			}
		}
	}
	if c.Embedded() {
		if c.ClusterTLSCert != "" || c.ClusterTLSKey != "" || c.ClusterTLSCA != "" {
			if c.ClusterTLSCert == "" || c.ClusterTLSKey == "" || c.ClusterTLSCA == "" {
				return errors.New("--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together: the routes use mutual TLS, so every node needs its certificate, its key and the authority that signs its peers'")
			}
			// Read the files now, so that a wrong one stops the start
			// with the flag's name rather than a failed route later.
			if _, err := routeTLSConfig(*c); err != nil {
				return err
			}
		}
		if c.ClusterListen == "" {
			return errors.New("--cluster-peers needs --cluster-listen: the address where this node's peers reach it")
		}
		if _, _, err := net.SplitHostPort(c.ClusterListen); err != nil {
			return fmt.Errorf("--cluster-listen must be host:port, not %q", c.ClusterListen)
		}
		for _, p := range c.ClusterPeers {
			if _, _, err := net.SplitHostPort(p); err != nil {
				return fmt.Errorf("--cluster-peers must be a comma-separated list of host:port, not %q", p)
			}
		}
	}
	if c.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return errors.New("--node-name is required: the host name is unknown")
		}
		c.NodeName = host
	}
	if !nodeNamePattern(c.NodeName) {
		return fmt.Errorf("--node-name must be 1 to 64 letters, digits, '_' or '-', not %q", c.NodeName)
	}
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("--cluster-replicas must be 0 (automatic) to 5, not %d", c.Replicas)
	case c.LeaseTTL < 0:
		return fmt.Errorf("--cluster-lease must not be negative, not %v", c.LeaseTTL)
	case c.LeaseTTL > 0 && c.LeaseTTL < 500*time.Millisecond:
		return fmt.Errorf("--cluster-lease must be at least 500ms, not %v", c.LeaseTTL)
	case c.ForwardTimeout < 0:
		return fmt.Errorf("--cluster-forward-timeout must not be negative, not %v", c.ForwardTimeout)
	case c.WorldReplicas < 0 || c.WorldReplicas > 4:
		return fmt.Errorf("--world-replicas must be 0 to 4, not %d", c.WorldReplicas)
	case c.SnapshotRecords < 0:
		return fmt.Errorf("--world-snapshot-records must not be negative, not %d", c.SnapshotRecords)
	case c.SnapshotBytes < 0:
		return fmt.Errorf("--world-snapshot-mib must not be negative, not %d", c.SnapshotBytes>>20)
	}
	if c.Embedded() && c.ClusterSecret == "" && !c.ClusterInsecure {
		host, _, _ := net.SplitHostPort(c.ClusterListen)
		if !loopback(host) {
			return fmt.Errorf("--cluster-listen %s is open beyond loopback, and no --cluster-secret (or --cluster-secret-file) is set: any host that reaches the port could join the cluster and act for any caller; set a secret, or pass --cluster-insecure on a network you trust", c.ClusterListen)
		}
	}
	return nil
}

// readSecret takes the cluster secret from its file when one is named, and
// refuses a secret too short to resist guessing.
func (c *Config) readSecret() error {
	if c.ClusterSecretFile != "" {
		if c.ClusterSecret != "" {
			return errors.New("--cluster-secret and --cluster-secret-file exclude each other: give the secret once")
		}
		f, err := os.Open(c.ClusterSecretFile)
		if err != nil {
			return fmt.Errorf("--cluster-secret-file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxClusterSecretFileBytes+1))
		if err != nil {
			return fmt.Errorf("--cluster-secret-file: %w", err)
		}
		if len(b) > maxClusterSecretFileBytes {
			return fmt.Errorf("--cluster-secret-file: %s is larger than %d bytes: it must hold only the secret", c.ClusterSecretFile, maxClusterSecretFileBytes)
		}
		c.ClusterSecret = strings.TrimSpace(string(b))
		if c.ClusterSecret == "" {
			return fmt.Errorf("--cluster-secret-file: %s is empty", c.ClusterSecretFile)
		}
	}
	if c.ClusterSecret != "" && len(c.ClusterSecret) < MinClusterSecretBytes {
		return fmt.Errorf("--cluster-secret must be at least %d bytes, not %d: a short secret can be guessed on the route port (make one with `openssl rand -hex 32`)", MinClusterSecretBytes, len(c.ClusterSecret))
	}
	return nil
}

// nodeNamePattern reports whether s may name a node: it becomes part of
// NATS subjects, so it must hold no dots, spaces or wildcards.
func nodeNamePattern(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// withDefaults fills in the defaults of the zero fields.
func (c Config) withDefaults() Config {
	if c.SnapshotRecords == 0 {
		c.SnapshotRecords = DefaultSnapshotRecords
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.ForwardTimeout == 0 {
		c.ForwardTimeout = DefaultForwardTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	return c
}
