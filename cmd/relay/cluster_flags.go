package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/tabletop-relay/relay/cluster"
)

// clusterFlags registers the flags of `relay serve` that join a cluster
// (package cluster) into cfg. With none of them set the relay runs alone,
// without NATS.
func clusterFlags(fs *flag.FlagSet, cfg *cluster.Config) {
	fs.StringVar(&cfg.NodeName, "node-name", "", "this node's `name` in a cluster: unique, the same across restarts (its world leases carry it); 1 to 64 letters, digits, '_' or '-'; the host name when empty (RELAY_NODE_NAME)")
	fs.StringVar(&cfg.ClusterListen, "cluster-listen", "", "start an embedded NATS server whose route port for the other nodes is this `host:port`, and run as a node of a cluster; off when empty, and then (without --nats) the relay runs alone with no NATS at all (RELAY_CLUSTER_LISTEN)")
	fs.Func("cluster-peers", "comma-separated `host:port` list of the other nodes' --cluster-listen addresses (this node's own may be among them); JetStream keeps min(3, nodes) copies of the shared state (RELAY_CLUSTER_PEERS)", func(s string) error {
		cfg.ClusterPeers = cluster.ParsePeers(s)
		return nil
	})
	fs.StringVar(&cfg.ClusterSecret, "cluster-secret", "", "`password` (at least 32 bytes) every node must present on the routes of the embedded NATS servers; without it any host that reaches --cluster-listen can join the cluster and act for any caller: set it, and keep the route ports on a private network, or encrypt the routes with --cluster-tls-*. Prefer --cluster-secret-file or the environment: the process list shows command lines (RELAY_CLUSTER_SECRET)")
	fs.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", "", "`file` holding --cluster-secret, white space around it ignored (RELAY_CLUSTER_SECRET_FILE)")
	fs.BoolVar(&cfg.ClusterInsecure, "cluster-insecure", false, "let a node whose --cluster-listen is open beyond loopback start without --cluster-secret, on a network you trust; without it such a node refuses to start (RELAY_CLUSTER_INSECURE)")
	fs.StringVar(&cfg.ClusterTLSCert, "cluster-tls-cert", "", "PEM certificate `file` of this node for mutual TLS on the routes between embedded NATS servers, used to accept and to open routes; with --cluster-tls-key and --cluster-tls-ca (RELAY_CLUSTER_TLS_CERT)")
	fs.StringVar(&cfg.ClusterTLSKey, "cluster-tls-key", "", "PEM key `file` of --cluster-tls-cert (RELAY_CLUSTER_TLS_KEY)")
	fs.StringVar(&cfg.ClusterTLSCA, "cluster-tls-ca", "", "PEM `file` of the authorities that sign the nodes' route certificates: a peer without a certificate they signed cannot join (RELAY_CLUSTER_TLS_CA)")
	fs.StringVar(&cfg.NATSURL, "nats", "", "connect to an existing NATS system with JetStream at these comma-separated `URLs` (nats://host:4222, tls://...) instead of embedding a NATS server; off when empty (RELAY_NATS)")
	fs.StringVar(&cfg.NATSCreds, "nats-creds", "", "NATS credentials `file` (JWT and NKey) for --nats (RELAY_NATS_CREDS)")
	fs.StringVar(&cfg.NATSTLSCA, "nats-tls-ca", "", "PEM `file` of the authorities that sign the NATS servers' certificates, for --nats; the system's when empty (RELAY_NATS_TLS_CA)")
	fs.StringVar(&cfg.NATSTLSCert, "nats-tls-cert", "", "PEM client certificate `file` for --nats, with --nats-tls-key (RELAY_NATS_TLS_CERT)")
	fs.StringVar(&cfg.NATSTLSKey, "nats-tls-key", "", "PEM client key `file` for --nats-tls-cert (RELAY_NATS_TLS_KEY)")
	fs.IntVar(&cfg.Replicas, "cluster-replicas", 0, "copies JetStream keeps of the shared state (keys, world registry); 0: min(3, the number of nodes) (RELAY_CLUSTER_REPLICAS)")
	fs.DurationVar(&cfg.LeaseTTL, "cluster-lease", cluster.DefaultLeaseTTL, "how long a node's hold on a world lasts without renewal (renewed every quarter of it): a world whose host died is unavailable (503) for at most this long, and a node cut off from the cluster stops serving its worlds after it (RELAY_CLUSTER_LEASE)")
	fs.IntVar(&cfg.WorldReplicas, "world-replicas", cluster.DefaultWorldReplicas, "how many other nodes keep a copy of each embedded world, applying its replicated log, and can take it over when its host is gone (capped by the number of nodes less one); 0 replicates nothing (RELAY_WORLD_REPLICAS)")
	fs.IntVar(&cfg.SnapshotRecords, "world-snapshot-records", cluster.DefaultSnapshotRecords, "a follower of a replicated world stores a snapshot of its copy in the cluster's object store once this many `records` of the world's log were applied since the newest snapshot; the log is then trimmed below the older of the world's two kept snapshots; 0: the default (RELAY_WORLD_SNAPSHOT_RECORDS)")
	cfg.SnapshotBytes = cluster.DefaultSnapshotBytes
	fs.Var(mebibytes{&cfg.SnapshotBytes}, "world-snapshot-mib", "a follower of a replicated world also stores a snapshot of its copy once this many `MiB` of the log's records were applied since the newest snapshot, if --world-snapshot-records did not come first; 0: the default (RELAY_WORLD_SNAPSHOT_MIB)")
	fs.DurationVar(&cfg.ForwardTimeout, "cluster-forward-timeout", cluster.DefaultForwardTimeout, "longest wait for the answer of a call forwarded to the node hosting its world, when the call has no earlier deadline; then 503 naming the world (RELAY_CLUSTER_FORWARD_TIMEOUT)")
}

// mebibytes is a flag given in MiB and kept in bytes.
type mebibytes struct{ bytes *int64 }

func (m mebibytes) String() string {
	if m.bytes == nil {
		return "0"
	}
	return strconv.FormatInt(*m.bytes>>20, 10)
}

func (m mebibytes) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<20 {
		return fmt.Errorf("want a whole number of MiB from 0 to %d, not %q", 1<<20, s)
	}
	*m.bytes = n << 20
	return nil
}
