package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/wire"
)

// clusterCommand runs `relay cluster ...`.
func clusterCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, "Usage: relay cluster status [flags]\n\nRun 'relay cluster status -h' for its flags.")
		return nil
	}
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, "Usage: relay cluster status [flags]")
		if len(args) == 0 {
			return usageError{"no cluster command given"}
		}
		return usageError{fmt.Sprintf("unknown cluster command %q", args[0])}
	}
	return clusterStatus(ctx, args[1:], stdout, stderr)
}

// clusterStatus prints the cluster's status as a running relay's GET
// /cluster describes it.
func clusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay cluster status", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	asJSON := fset.Bool("json", false, "print the relay's JSON answer as it is")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay cluster status [flags]\n\nShows the cluster as the relay at --addr sees it: its NATS and JetStream\nhealth, the nodes, and the worlds each node hosts. Needs a key with the\nadmin scope.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fset.Arg(0))}
	}
	key, err := cf.apiKey()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	base := cf.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/cluster", nil)
	if err != nil {
		return usageError{fmt.Sprintf("--addr: %v", err)}
	}
	req.Header.Set(wire.APIKeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("relay at %s: %w", cf.addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("relay at %s: %w", cf.addr, err)
	}
	var env struct {
		Data  cluster.Status `json:"data"`
		Error string         `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("relay at %s: %s: not a cluster status", cf.addr, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("relay at %s: %s (%d)", cf.addr, env.Error, resp.StatusCode)
	}
	if *asJSON {
		_, err := stdout.Write(append(body, '\n'))
		return err
	}
	printClusterStatus(stdout, env.Data)
	return nil
}

// printClusterStatus writes a status for people to read.
func printClusterStatus(w io.Writer, st cluster.Status) {
	if !st.Enabled {
		fmt.Fprintln(w, "This relay runs alone: no cluster flags were given.")
		return
	}
	nats := "connected"
	if !st.NATS.Connected {
		nats = "DISCONNECTED"
	}
	mode := "external NATS"
	if st.NATS.Embedded {
		mode = fmt.Sprintf("embedded NATS, %d routes", st.NATS.Routes)
	}
	fmt.Fprintf(w, "Node %s: %s (%s", st.Node, nats, mode)
	if st.NATS.RTT != "" {
		fmt.Fprintf(w, ", rtt %s", st.NATS.RTT)
	}
	fmt.Fprintln(w, ")")
	js := "ok"
	if !st.JetStream.OK {
		js = "FAILING: " + st.JetStream.Error
	}
	fmt.Fprintf(w, "JetStream: %s, %d replicas", js, st.JetStream.Replicas)
	if len(st.JetStream.Peers) > 0 {
		fmt.Fprintf(w, ", peers %s (leader %s)", strings.Join(st.JetStream.Peers, ", "), cmp.Or(st.JetStream.MetaLeader, "none"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tWORLD\tKIND\tLEASE")
	for _, n := range st.Nodes {
		state := "live"
		if !n.Live {
			state = "down"
		}
		if len(n.Worlds) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\n", n.Name, state)
		}
		for _, wd := range n.Worlds {
			lease := "held until " + wd.Expires.Local().Format("15:04:05")
			switch {
			case wd.Refused:
				lease = "REFUSED: another node hosts this client id"
			case !wd.Live:
				lease = "expired"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, state, wd.ClientID, wd.Kind, lease)
		}
	}
	_ = tw.Flush()
}
