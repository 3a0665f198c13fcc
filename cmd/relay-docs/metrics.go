package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// metricsPage starts a relay on loopback with its metrics on, makes one
// REST and one gRPC call so that the metrics with labels have a series, and
// renders every relay_* metric it then serves.
func metricsPage(relayBin, tmp string) ([]byte, error) {
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(relayBin, "serve", "--listen", api, "--metrics-listen", metricsAddr,
		"--data", filepath.Join(tmp, "data"), "--log-level", "error")
	cmd.Env = cleanEnv()
	// Standard output carries the new admin key: not for the terminal.
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	// The first scrape, before any call, holds only the series that exist
	// from registration: their label values are fixed and worth listing.
	var registered map[string]*dto.MetricFamily
	deadline := time.Now().Add(60 * time.Second)
	for {
		registered, err = scrape(metricsAddr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the relay did not serve its metrics: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + api + "/healthz")
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	conn, err := grpc.NewClient(api, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Refused for want of a key, and counted all the same.
	_ = conn.Invoke(ctx, "/relay.v1.ClientService/ListClients", &emptypb.Empty{}, &emptypb.Empty{})
	conn.Close()
	families, err := scrape(metricsAddr)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(families))
	for name := range families {
		if strings.HasPrefix(name, "relay_") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("the relay serves no relay_* metric")
	}

	var b bytes.Buffer
	b.WriteString(generatedNote)
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Every metric of the relay, as a running relay registers it. `relay serve --metrics-listen host:port` serves them at `/metrics` in Prometheus's text format, next to the Go runtime's (`go_*`) and the process's (`process_*`); [Metrics and logs](../operations/metrics-and-logs.md) says how to use them.\n\n")
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, name := range names {
		f := families[name]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, strings.ToLower(f.GetType().String()), labels(f, registered[name]), cell(f.GetHelp()))
	}
	return b.Bytes(), nil
}

// labels lists a family's label names, each with its values when the
// family already had several series before any call (registered, the same
// family scraped then): those values are an enumeration fixed at
// registration, such as one counter per rate limit. A single series, such
// as one that names the build, keeps its values to itself, since they
// change from build to build.
func labels(f, registered *dto.MetricFamily) string {
	fixed := map[string]map[string]bool{}
	series := registered.GetMetric()
	if len(series) < 2 {
		series = nil
	}
	for _, m := range series {
		for _, l := range m.GetLabel() {
			if fixed[l.GetName()] == nil {
				fixed[l.GetName()] = map[string]bool{}
			}
			fixed[l.GetName()][l.GetValue()] = true
		}
	}
	var names []string
	seen := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if !seen[l.GetName()] {
				seen[l.GetName()] = true
				names = append(names, l.GetName())
			}
		}
	}
	parts := make([]string, 0, len(names))
	for _, name := range names {
		part := "`" + name + "`"
		if vals := fixed[name]; len(vals) > 0 {
			vs := make([]string, 0, len(vals))
			for v := range vals {
				vs = append(vs, "`"+v+"`")
			}
			sort.Strings(vs)
			part += " = " + strings.Join(vs, ", ")
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// scrape reads the metrics the relay serves at addr.
func scrape(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
