// Command relay serves the relay API (REST, Server-Sent Events and gRPC on
// one address) in front of tabletop worlds, and administers its API keys.
//
//	relay serve [flags]             start the relay
//	relay keys create|list|revoke   manage API keys of a running relay
//	relay accounts create|list|...  manage the accounts of a running relay
//	relay invites create|list|revoke  manage the invites to sign up
//	relay audit                     list the audit log of a running relay
//	relay worlds list               list the worlds of a running relay
//	relay worlds pair-code          create a code that links a real tabletop
//	relay worlds unpair CLIENT_ID   unlink a linked world
//	relay worlds create|delete      make or remove an embedded world
//	relay health                    check a running relay's /healthz and /readyz
//	relay version                   print the version, commit and date
//
// Every flag has a RELAY_* environment variable; `relay <command> -h` lists
// them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tabletop-relay/relay/world/script"
)

const usage = `relay: an API in front of tabletop worlds

Usage:
  relay serve [flags]           start the relay (REST, SSE and gRPC on one address)
  relay keys create [flags]     create an API key and print it
  relay keys list [flags]       list API keys
  relay keys revoke [flags] ID  revoke an API key
  relay accounts create|list|show|suspend|resume|delete [flags] [ID]
                                manage accounts (the operator's key)
  relay invites create|list|revoke [flags] [ID]
                                manage the invites to sign up (the operator's key)
  relay audit [flags]           list the audit log (the key's account, or all
                                with the operator's key)
  relay worlds list [flags]     list worlds
  relay worlds pair-code [flags]
                                create a one-time code that links a real tabletop
  relay worlds unpair [flags] CLIENT_ID
                                unlink a linked world (revoke its token)
  relay worlds create --title TITLE [--seed demo|empty] [--client ID] [flags]
                                make an embedded world in the key's account
  relay worlds delete [flags] CLIENT_ID
                                remove an embedded world
  relay cluster status [flags]  show the cluster's nodes, their worlds and health
  relay health [flags]          succeed when a running relay is healthy and ready
  relay version                 print the version, commit and date (also --version)

Run 'relay <command> -h' for the flags of a command.
`

func main() {
	// A relay started as an execute-js worker serves its one script and
	// exits here, before anything else runs (see script.Pool).
	script.WorkerMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // help was asked for and printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors, 1 for everything else.
func exitCode(err error) int {
	var uerr usageError
	if errors.As(err, &uerr) {
		return 2
	}
	return 1
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run dispatches a command line; stdout gets results only, stderr progress
// and messages.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serveCommand(ctx, args[1:], stdout, stderr)
	case "keys":
		return keysCommand(ctx, args[1:], stdout, stderr)
	case "accounts":
		return accountsCommand(ctx, args[1:], stdout, stderr)
	case "invites":
		return invitesCommand(ctx, args[1:], stdout, stderr)
	case "audit":
		return auditCommand(ctx, args[1:], stdout, stderr)
	case "worlds":
		return worldsCommand(ctx, args[1:], stdout, stderr)
	case "cluster":
		return clusterCommand(ctx, args[1:], stdout, stderr)
	case "health":
		return healthCommand(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		printVersion(stdout, buildInfo())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
