package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"google.golang.org/grpc"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// worldsPairCode creates a pairing code on a running relay and prints only
// the code on standard output.
func worldsPairCode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay worlds pair-code", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	clientID := fset.String("client", "", "the `clientId` of a linked world to pair again (replacing its connection token); empty pairs a new world")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay worlds pair-code [--client CLIENT_ID] [flags]\n\nCreates a one-time pairing code (valid 10 minutes) on a running relay and\nprints only the code on standard output. The game master types it into the\nREST API module's connection dialog. Needs a key with the admin scope that\ndoes not act as a tabletop user; a key bound to worlds may only pair one of\nits worlds again (--client).\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (use --client to pair a world again)", fset.Arg(0))}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := relayv1.NewLinkServiceClient(conn).CreatePairingCode(ctx, &relayv1.CreatePairingCodeRequest{ClientId: *clientID})
	if err != nil {
		return cf.callError(err)
	}
	what := "a new world"
	if resp.GetClientId() != "" {
		what = "world " + resp.GetClientId() + " again"
	}
	fmt.Fprintf(stderr, "Pairing code for %s, valid until %s: type it into the module's connection dialog\n", what, resp.GetExpiresAt())
	fmt.Fprintln(stdout, resp.GetCode())
	return nil
}

// worldsUnpair unpairs a linked world on a running relay.
func worldsUnpair(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "Usage: relay worlds unpair [flags] CLIENT_ID\n\nUnpairs a linked world: its connection token is revoked and its connection\nclosed. The world keeps its clientId; a new pairing code restores it.\n\nFlags:"
	return idCommand(ctx, "relay worlds unpair", args, stderr, usage, "clientId",
		func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, clientID string) error {
			resp, err := relayv1.NewLinkServiceClient(conn).UnpairWorld(ctx, &relayv1.UnpairWorldRequest{ClientId: clientID})
			if err != nil {
				return cf.callError(err)
			}
			state := "it was not connected"
			if resp.GetDisconnected() {
				state = "its connection was closed"
			}
			fmt.Fprintf(stderr, "Unpaired world %s: %d connection token(s) revoked; %s\n", resp.GetClientId(), resp.GetRevokedTokens(), state)
			return nil
		})
}

// worldsCreate makes an embedded world on a running relay and prints only
// its clientId on standard output.
func worldsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay worlds create", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cf clientFlags
	cf.register(fset)
	title := fset.String("title", "", "the world's `title` (required)")
	seed := fset.String("seed", "empty", "what the world starts with: `demo` (the demo world's content and files) or empty (one game master)")
	clientID := fset.String("client", "", "the new world's `clientId`; the relay picks one when empty")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay worlds create --title TITLE [--seed demo|empty] [--client CLIENT_ID] [flags]\n\nMakes an embedded world in the account of the key, within its worlds quota,\nand prints only its clientId on standard output. Needs a key with the admin\nscope that is bound to no world and acts as no tabletop user.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (use --title, --seed and --client)", fset.Arg(0))}
	}
	if *title == "" {
		fset.Usage()
		return usageError{"--title is required"}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := relayv1.NewWorldServiceClient(conn).CreateWorld(ctx, &relayv1.CreateWorldRequest{ClientId: *clientID, Title: *title, Seed: *seed})
	if err != nil {
		return cf.callError(err)
	}
	fmt.Fprintf(stderr, "Made world %s (%s, from the %s seed) in account %s\n", resp.GetClientId(), resp.GetTitle(), resp.GetSeed(), resp.GetAccountId())
	fmt.Fprintln(stdout, resp.GetClientId())
	return nil
}

// worldsDelete removes an embedded world on a running relay.
func worldsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "Usage: relay worlds delete [flags] CLIENT_ID\n\nRemoves an embedded world with its documents, events and files, for good.\nOnly its account's keys and the operator's may. A linked world is unpaired\ninstead (relay worlds unpair).\n\nFlags:"
	return idCommand(ctx, "relay worlds delete", args, stderr, usage, "clientId",
		func(ctx context.Context, conn *grpc.ClientConn, cf *clientFlags, clientID string) error {
			resp, err := relayv1.NewWorldServiceClient(conn).DeleteWorld(ctx, &relayv1.DeleteWorldRequest{ClientId: clientID})
			if err != nil {
				return cf.callError(err)
			}
			fmt.Fprintf(stderr, "Removed world %s\n", resp.GetClientId())
			return nil
		})
}
