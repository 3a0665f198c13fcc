package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"google.golang.org/grpc"
)

// invitesCommand manages the invites to sign up of a running relay
// (`--signup invite`), with the operator's key.
func invitesCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Usage: relay invites create|list|revoke [flags]")
		return usageError{"invites needs a subcommand"}
	}
	switch args[0] {
	case "create":
		return invitesCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return invitesList(ctx, args[1:], stdout, stderr)
	case "revoke":
		return invitesRevoke(ctx, args[1:], stdout, stderr)
	}
	return usageError{fmt.Sprintf("unknown invites subcommand %q (create, list or revoke)", args[0])}
}

func invitesCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay invites create", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	expires := fset.Duration("expires-in", 0, "how long the invite lasts, from 1m to 2160h (90 days); 0: 168h (7 days)")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay invites create [flags]\n\nMakes a single-use invite to sign up (POST /signup with --signup invite) and\nprints only its code on standard output (shown this once). Needs the\noperator's key.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *expires < 0 || (*expires > 0 && *expires < time.Minute) {
		return usageError{"--expires-in must be at least 1m (or 0 for 7 days)"}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := relayv1.NewSigninServiceClient(conn).CreateInvite(ctx, &relayv1.CreateInviteRequest{ExpiresInSeconds: int64(*expires / time.Second)})
	if err != nil {
		return cf.callError(err)
	}
	inv := resp.GetInvite()
	fmt.Fprintf(stderr, "Created invite %s, usable once until %s; its code follows\n", inv.GetId(), inv.GetExpiresAt())
	fmt.Fprintln(stdout, resp.GetCode())
	return nil
}

func invitesList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return listCommand(ctx, "relay invites list", args, stdout, stderr,
		func(ctx context.Context, conn *grpc.ClientConn) ([]*relayv1.Invite, error) {
			resp, err := relayv1.NewSigninServiceClient(conn).ListInvites(ctx, &relayv1.ListInvitesRequest{})
			return resp.GetInvites(), err
		},
		[]string{"ID", "STATUS", "CREATED", "EXPIRES", "ACCOUNT"},
		func(inv *relayv1.Invite) []string {
			return []string{inv.GetId(), inv.GetStatus(), inv.GetCreatedAt(), inv.GetExpiresAt(), orDash(inv.GetAccountId())}
		})
}

func invitesRevoke(ctx context.Context, args []string, _, stderr io.Writer) error {
	return idCommand(ctx, "relay invites revoke", args, stderr, "", "invite ID (see relay invites list)",
		func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, id string) error {
			resp, err := relayv1.NewSigninServiceClient(conn).RevokeInvite(ctx, &relayv1.RevokeInviteRequest{Id: id})
			if err != nil {
				return cf.callError(err)
			}
			fmt.Fprintf(stderr, "Invite %s is %s\n", resp.GetInvite().GetId(), resp.GetInvite().GetStatus())
			return nil
		})
}
