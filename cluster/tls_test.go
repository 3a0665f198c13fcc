package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // the file of its certificate
}

// newTestCA makes an authority and writes its certificate to dir.
func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.pem, "CERTIFICATE", der)
	return ca
}

// issue makes a node certificate for 127.0.0.1, good to serve and to
// connect, and writes it and its key to dir.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRoutesOverMutualTLS: three nodes whose certificates one authority
// signed form a cluster over TLS routes, and JetStream keeps three copies
// across them; a fourth node that trusts that authority but holds a
// certificate of another cannot join: it does not start, and the cluster's
// routes are as they were.
func TestRoutesOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "relay-ca")
	cfgs := clustertest.Configs(t, 4, time.Second)
	for i := range cfgs {
		cfgs[i].ClusterTLSCA = ca.pem
		cfgs[i].ClusterTLSCert, cfgs[i].ClusterTLSKey = ca.issue(t, dir, cfgs[i].NodeName)
	}
	// The fourth is the intruder, named among nobody's peers but knowing
	// theirs; its certificate comes from an authority of its own.
	intruder := cfgs[3]
	intruder.ClusterTLSCert, intruder.ClusterTLSKey = newTestCA(t, dir, "other-ca").issue(t, dir, "n4")
	// Long enough for its NATS server to start on a loaded machine: the
	// intruder must fail for want of a cluster, not of a server.
	intruder.StartTimeout = 20 * time.Second
	cfgs = cfgs[:3]
	for i := range cfgs {
		cfgs[i].ClusterPeers = cfgs[i].ClusterPeers[:3]
	}
	nodes := startNodes(t, cfgs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := nodes[0].KeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tls", Replicas: 3})
	if err != nil {
		t.Fatalf("a bucket of three copies over TLS routes: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put: %v", err)
	}
	// n1 routes to both its peers (a route of the pool may still be
	// connecting on a loaded machine: they are counted by peer).
	waitFor(t, 30*time.Second, "n1's routes to n2 and n3", func() bool {
		peers := nodes[0].RoutePeers()
		return slices.Contains(peers, "n2") && slices.Contains(peers, "n3")
	})

	if err := intruder.Check(); err != nil {
		t.Fatal(err)
	}
	n4, err := cluster.Start(ctx, intruder, testLog(t))
	if err == nil {
		n4.Close()
		t.Fatal("a node with a certificate of another authority joined the cluster")
	}
	if !strings.Contains(err.Error(), "JetStream did not become ready") {
		t.Fatalf("the intruder's start: %v", err)
	}
	if peers := nodes[0].RoutePeers(); slices.Contains(peers, "n4") {
		t.Fatalf("n1 routes to the intruder: %v", peers)
	}
	// And the cluster still answers.
	if _, err := kv.Get(ctx, "k"); err != nil {
		t.Fatalf("the bucket after the intruder: %v", err)
	}
}
