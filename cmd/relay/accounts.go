package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"google.golang.org/grpc"
)

// accountsCommand manages the accounts of a running relay, with the
// operator's key (the bootstrap admin key, or an operator-account key
// with the scope `accounts`).
func accountsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Usage: relay accounts create|list|show|suspend|resume|delete [flags]")
		return usageError{"accounts needs a subcommand"}
	}
	switch args[0] {
	case "create":
		return accountsCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return accountsList(ctx, args[1:], stdout, stderr)
	case "show", "suspend", "resume", "delete":
		return accountsByID(ctx, args[0], args[1:], stdout, stderr)
	}
	return usageError{fmt.Sprintf("unknown accounts subcommand %q (create, list, show, suspend, resume or delete)", args[0])}
}

// quotaFlags are the quota flags of `relay accounts create`.
type quotaFlags struct {
	worlds, keys, streams, rpm int
	uploadBytes, storedBytes   int64
}

func (q *quotaFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&q.worlds, "quota-worlds", 0, "how many worlds the account may own (0: the relay's default)")
	fs.IntVar(&q.keys, "quota-keys", 0, "how many unrevoked keys the account may hold (0: the relay's default)")
	fs.IntVar(&q.streams, "quota-streams", 0, "how many event streams the account may hold open (0: the relay's default)")
	fs.IntVar(&q.rpm, "quota-requests-per-minute", 0, "how many calls the account may make a minute (0: the relay's default)")
	fs.Int64Var(&q.uploadBytes, "quota-upload-bytes", 0, "the largest file in `bytes` the account may upload (0: the relay's default)")
	fs.Int64Var(&q.storedBytes, "quota-stored-bytes", 0, "how many `bytes` the account's embedded worlds may hold on disk (0: the relay's default)")
}

func (q *quotaFlags) proto() *relayv1.AccountQuotas {
	return &relayv1.AccountQuotas{Worlds: int32(q.worlds), Keys: int32(q.keys), Streams: int32(q.streams), RequestsPerMinute: int32(q.rpm),
		UploadBytes: q.uploadBytes, StoredBytes: q.storedBytes}
}

func accountsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay accounts create", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		cf   clientFlags
		q    quotaFlags
		name = fset.String("name", "", "the account's name, unique ignoring case (required)")
	)
	cf.register(fset)
	q.register(fset)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay accounts create --name NAME [flags]\n\nCreates an account on a running relay and prints only its first admin key on\nstandard output (shown this once). Needs the operator's key.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		fset.Usage()
		return usageError{"--name is required"}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := relayv1.NewAccountServiceClient(conn).CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: *name, Quotas: q.proto()})
	if err != nil {
		return cf.callError(err)
	}
	a := resp.GetAccount()
	fmt.Fprintf(stderr, "Created account %s (%s); its first admin key follows\n", a.GetId(), a.GetName())
	fmt.Fprintln(stdout, resp.GetKey())
	return nil
}

func accountsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return listCommand(ctx, "relay accounts list", args, stdout, stderr,
		func(ctx context.Context, conn *grpc.ClientConn) ([]*relayv1.Account, error) {
			resp, err := relayv1.NewAccountServiceClient(conn).ListAccounts(ctx, &relayv1.ListAccountsRequest{})
			return resp.GetAccounts(), err
		},
		[]string{"ID", "NAME", "STATE", "KEYS", "CREATED"},
		func(a *relayv1.Account) []string {
			return []string{a.GetId(), a.GetName(), accountState(a), strconv.FormatInt(int64(a.GetUsage().GetKeys()), 10), orDash(a.GetCreatedAt())}
		})
}

// accountsByID runs the subcommands that take one account id.
func accountsByID(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	return idCommand(ctx, "relay accounts "+verb, args, stderr, "", "account ID (see relay accounts list)",
		func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, id string) error {
			svc := relayv1.NewAccountServiceClient(conn)
			var a *relayv1.Account
			var err error
			switch verb {
			case "show":
				var resp *relayv1.GetAccountResponse
				if resp, err = svc.GetAccount(ctx, &relayv1.GetAccountRequest{Id: id}); err == nil {
					a = resp.GetAccount()
				}
			case "suspend":
				var resp *relayv1.SuspendAccountResponse
				if resp, err = svc.SuspendAccount(ctx, &relayv1.SuspendAccountRequest{Id: id}); err == nil {
					a = resp.GetAccount()
				}
			case "resume":
				var resp *relayv1.ResumeAccountResponse
				if resp, err = svc.ResumeAccount(ctx, &relayv1.ResumeAccountRequest{Id: id}); err == nil {
					a = resp.GetAccount()
				}
			case "delete":
				var resp *relayv1.DeleteAccountResponse
				if resp, err = svc.DeleteAccount(ctx, &relayv1.DeleteAccountRequest{Id: id}); err == nil {
					a = resp.GetAccount()
				}
			}
			if err != nil {
				return cf.callError(err)
			}
			switch verb {
			case "suspend":
				fmt.Fprintf(stderr, "Suspended account %s (%s); its keys are refused until it is resumed\n", a.GetId(), a.GetName())
			case "resume":
				fmt.Fprintf(stderr, "Resumed account %s (%s)\n", a.GetId(), a.GetName())
			case "delete":
				fmt.Fprintf(stderr, "Deleted account %s (%s) with its keys and worlds\n", a.GetId(), a.GetName())
				return nil
			}
			l, u := a.GetLimits(), a.GetUsage()
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "id\t%s\nname\t%s\nstate\t%s\ncreated\t%s\n", a.GetId(), a.GetName(), accountState(a), orDash(a.GetCreatedAt()))
			fmt.Fprintf(tw, "keys\t%d of %s\nworlds\t%d of %s\nstreams\t%d of %s\nrequests this minute\t%d of %s\nstored bytes\t%d of %s\nupload bytes per file\t%s\n",
				u.GetKeys(), limitText(int64(l.GetKeys())), u.GetWorlds(), limitText(int64(l.GetWorlds())), u.GetStreams(), limitText(int64(l.GetStreams())),
				u.GetRequestsThisMinute(), limitText(int64(l.GetRequestsPerMinute())), u.GetStoredBytes(), limitText(l.GetStoredBytes()), limitText(l.GetUploadBytes()))
			return tw.Flush()
		})
}

// accountState describes whether an account is suspended.
func accountState(a *relayv1.Account) string {
	if a.GetSuspended() {
		return "suspended since " + a.GetSuspendedAt()
	}
	return "active"
}

// limitText shows a limit that applies, 0 being none.
func limitText(v int64) string {
	if v == 0 {
		return "no limit"
	}
	return strconv.FormatInt(v, 10)
}
