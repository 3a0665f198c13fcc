package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/wire"
)

// clientFlags are the flags of every command that talks to a running relay.
type clientFlags struct {
	addr         string
	adminKeyFile string
	timeout      time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", envOr("RELAY_ADDR", "127.0.0.1:8080"), "`host:port` of the running relay (RELAY_ADDR)")
	fs.StringVar(&c.adminKeyFile, "admin-key-file", "", "`file` holding an API key with the needed scope; default: RELAY_API_KEY, else ./data/admin.key")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the relay")
}

// apiKey finds the key to call with: the named file, RELAY_API_KEY, or
// ./data/admin.key.
func (c *clientFlags) apiKey() (string, error) {
	path := c.adminKeyFile
	if path == "" {
		if v := strings.TrimSpace(os.Getenv("RELAY_API_KEY")); v != "" {
			return v, nil
		}
		path = "./data/admin.key"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read API key: %w (pass --admin-key-file or set RELAY_API_KEY)", err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return "", fmt.Errorf("API key file %s is empty", path)
	}
	return key, nil
}

// dial connects to the relay's gRPC endpoint and returns a context carrying
// the API key.
func (c *clientFlags) dial(ctx context.Context) (context.Context, *grpc.ClientConn, context.CancelFunc, error) {
	key, err := c.apiKey()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	ctx = metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, key)
	return ctx, conn, func() { cancel(); _ = conn.Close() }, nil
}

// callError turns an RPC failure into a message naming the relay.
func (c *clientFlags) callError(err error) error {
	st := status.Convert(err)
	return fmt.Errorf("relay at %s: %s (%s)", c.addr, st.Message(), st.Code())
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// commaList is a flag that takes a comma-separated list, and may also be
// given several times; the lists add up.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }

func (l *commaList) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fmt.Errorf("empty item in %q", v)
		}
		*l = append(*l, item)
	}
	return nil
}

// keysUsage is the help of `relay keys`.
const keysUsage = `Usage:
  relay keys create --name NAME --scopes SCOPES [flags]
                                create an API key and print it
  relay keys list [flags]       list API keys
  relay keys revoke [flags] ID  revoke an API key

Run 'relay keys <command> -h' for the flags of a command.
`

// worldsUsage is the help of `relay worlds`.
const worldsUsage = `Usage:
  relay worlds list [flags]     list worlds
  relay worlds pair-code [flags]
                                create a one-time code that links a real tabletop
  relay worlds unpair [flags] CLIENT_ID
                                unlink a linked world (revoke its token)
  relay worlds create --title TITLE [--seed demo|empty] [--client ID] [flags]
                                make an embedded world in the key's account
  relay worlds delete [flags] CLIENT_ID
                                remove an embedded world with everything in it

Run 'relay worlds <command> -h' for the flags of a command.
`

// isHelp reports whether a command's argument asks for its help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func keysCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return usageError{"keys needs a command: create, list or revoke"}
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, keysUsage)
		return nil
	}
	switch args[0] {
	case "create":
		return keysCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return keysList(ctx, args[1:], stdout, stderr)
	case "revoke":
		return keysRevoke(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, keysUsage)
	return usageError{fmt.Sprintf("unknown keys command %q (create, list or revoke)", args[0])}
}

func keysCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay keys create", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		cf          clientFlags
		name        = fset.String("name", "", "a name to recognise the key by (required)")
		scopes      = fset.String("scopes", "", "comma-separated `scopes`, or all for every scope (required)")
		user        = fset.String("user", "", "tabletop user (id or name) every request acts as, in every world")
		expires     = fset.String("expires", "", "expiry: an RFC 3339 time or a duration from now such as 720h")
		clients     commaList
		clientUsers repeated
	)
	cf.register(fset)
	fset.Var(&clients, "client", "the `clientIds` the key may use, comma-separated or repeated (every world when absent)")
	fset.Var(&clientUsers, "client-user", "`clientId=user`: the user the key acts as in that world (repeatable)")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay keys create --name NAME --scopes SCOPES [flags]\n\nCreates an API key on a running relay and prints only the key on standard output.\nThe new key must stay within the calling key's bindings: some of its worlds\n(--client is required when it is bound to worlds), the same user wherever it\nacts as a user, some of its scopes, and an expiry no later than its own.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *name == "" || *scopes == "" {
		fset.Usage()
		return usageError{"--name and --scopes are required"}
	}
	req := &relayv1.CreateKeyRequest{
		Name:         *name,
		Scopes:       []string{*scopes},
		ClientIds:    clients,
		ScopedUserId: *user,
		ClientUsers:  map[string]string{},
	}
	for _, cu := range clientUsers {
		cid, u, ok := strings.Cut(cu, "=")
		if !ok || cid == "" || u == "" {
			return usageError{fmt.Sprintf("--client-user %q: want clientId=user", cu)}
		}
		req.ClientUsers[cid] = u
	}
	if *expires != "" {
		t, err := parseExpiry(*expires, time.Now())
		if err != nil {
			return usageError{err.Error()}
		}
		req.ExpiresAt = t.UTC().Format(time.RFC3339)
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := relayv1.NewKeyServiceClient(conn).CreateKey(ctx, req)
	if err != nil {
		return cf.callError(err)
	}
	k := resp.GetApiKey()
	fmt.Fprintf(stderr, "Created key %s (%s) with scopes %s\n", k.GetId(), k.GetName(), strings.Join(k.GetScopes(), ","))
	fmt.Fprintln(stdout, resp.GetKey())
	return nil
}

// parseExpiry reads an RFC 3339 time or a duration from now.
func parseExpiry(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--expires %q: want an RFC 3339 time or a positive duration such as 720h", v)
	}
	return now.Add(d), nil
}

func keysList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return listCommand(ctx, "relay keys list", args, stdout, stderr,
		func(ctx context.Context, conn *grpc.ClientConn) ([]*relayv1.ApiKey, error) {
			resp, err := relayv1.NewKeyServiceClient(conn).ListKeys(ctx, &relayv1.ListKeysRequest{})
			return resp.GetKeys(), err
		},
		[]string{"ID", "NAME", "PREFIX", "SCOPES", "CLIENTS", "USER", "STATE", "EXPIRES", "CREATED BY"},
		func(k *relayv1.ApiKey) []string {
			return []string{k.GetId(), k.GetName(), k.GetPrefix(),
				strings.Join(k.GetScopes(), ","), orDash(strings.Join(k.GetClientIds(), ",")),
				orDash(keyUsers(k)), keyState(k), orDash(k.GetExpiresAt()), orDash(k.GetCreatedBy())}
		})
}

// keyUsers describes the users a key acts as.
func keyUsers(k *relayv1.ApiKey) string {
	var parts []string
	if k.GetScopedUserId() != "" {
		parts = append(parts, k.GetScopedUserId())
	}
	for cid, u := range k.GetClientUsers() {
		parts = append(parts, cid+"="+u)
	}
	return strings.Join(parts, ",")
}

func keyState(k *relayv1.ApiKey) string {
	switch {
	case k.GetRevokedAt() != "":
		return "revoked"
	case !k.GetEnabled():
		return "disabled"
	}
	return "active"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseOneArg parses a command's flags and its one argument; none or
// more than one is refused saying that the command (the flag set's name)
// needs exactly one of what needs names.
func parseOneArg(fset *flag.FlagSet, args []string, needs string) (string, error) {
	if err := fset.Parse(args); err != nil {
		return "", err
	}
	if fset.NArg() != 1 {
		return "", usageError{fset.Name() + " needs exactly one " + needs}
	}
	return fset.Arg(0), nil
}

// idCommand runs a command that takes one id: it parses the client flags
// and the id (needs says what the id is, for the usage error), dials the
// relay and hands the connection and the id to run. usage, when not
// empty, is printed above the flags by -h.
func idCommand(ctx context.Context, name string, args []string, stderr io.Writer, usage, needs string,
	run func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, id string) error) error {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	if usage != "" {
		fset.Usage = func() {
			fmt.Fprintln(stderr, usage)
			fset.PrintDefaults()
		}
	}
	id, err := parseOneArg(fset, args, needs)
	if err != nil {
		return err
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	return run(ctx, conn, &cf, id)
}

// listCommand runs a list command (the flag set's name): it parses the
// client flags, refuses arguments, asks the relay for the items with
// fetch, and prints them as an aligned table, one row of cells per item
// under the header.
func listCommand[T any](ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	fetch func(context.Context, *grpc.ClientConn) ([]T, error), header []string, cells func(T) []string) error {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{name + " takes no arguments"}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	items, err := fetch(ctx, conn)
	if err != nil {
		return cf.callError(err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, item := range items {
		fmt.Fprintln(tw, strings.Join(cells(item), "\t"))
	}
	return tw.Flush()
}

func keysRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return idCommand(ctx, "relay keys revoke", args, stderr, "", "key ID (see relay keys list)",
		func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, id string) error {
			resp, err := relayv1.NewKeyServiceClient(conn).RevokeKey(ctx, &relayv1.RevokeKeyRequest{Id: id})
			if err != nil {
				return cf.callError(err)
			}
			fmt.Fprintf(stderr, "Revoked key %s (%s); requests with it are refused from now on\n", resp.GetApiKey().GetId(), resp.GetApiKey().GetName())
			return nil
		})
}

func worldsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, worldsUsage)
		return nil
	}
	if len(args) > 0 {
		switch args[0] {
		case "pair-code":
			return worldsPairCode(ctx, args[1:], stdout, stderr)
		case "unpair":
			return worldsUnpair(ctx, args[1:], stdout, stderr)
		case "create":
			return worldsCreate(ctx, args[1:], stdout, stderr)
		case "delete":
			return worldsDelete(ctx, args[1:], stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] != "list" {
		fmt.Fprint(stderr, worldsUsage)
		if len(args) == 0 {
			return usageError{"worlds needs a command: list, pair-code, unpair, create or delete"}
		}
		return usageError{fmt.Sprintf("unknown worlds command %q (list, pair-code, unpair, create or delete)", args[0])}
	}
	return listCommand(ctx, "relay worlds list", args[1:], stdout, stderr,
		func(ctx context.Context, conn *grpc.ClientConn) ([]*relayv1.Client, error) {
			resp, err := relayv1.NewClientServiceClient(conn).ListClients(ctx, &relayv1.ListClientsRequest{})
			return resp.GetClients(), err
		},
		[]string{"CLIENT ID", "TITLE", "SYSTEM"},
		func(c *relayv1.Client) []string { return []string{c.GetClientId(), c.GetTitle(), c.GetSystem()} })
}
