package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// auditCommand lists the audit log of a running relay: the records of the
// key's own account, or every record with a key of the operator's
// account.
func auditCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay audit", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		cf      clientFlags
		since   = fset.String("since", "", "only records at or after this RFC 3339 `time`")
		until   = fset.String("until", "", "only records at or before this RFC 3339 `time`")
		action  = fset.String("action", "", "only this `action` (key.create) or class of actions (key)")
		account = fset.String("account", "", "only the records of this account `id` (the operator's key)")
		limit   = fset.Int("limit", 0, "at most this many `records` (0: every record, a page at a time)")
	)
	cf.register(fset)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay audit [flags]\n\nLists the audit log of a running relay, oldest first: the records of the\nkey's account, or every record with a key of the operator's account.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		fset.Usage()
		return usageError{"relay audit takes no arguments"}
	}
	if *limit < 0 {
		return usageError{"--limit must be 0 or more"}
	}
	ctx, conn, done, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	svc := relayv1.NewAuditServiceClient(conn)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACCOUNT\tKEY\tADDRESS\tACTION\tTARGET\tOUTCOME\tDETAIL")
	req := &relayv1.ListAuditRecordsRequest{Since: *since, Until: *until, Action: *action, AccountId: *account}
	shown := 0
	for {
		if *limit > 0 {
			req.Limit = int32(min(*limit-shown, 1000))
		}
		resp, err := svc.ListAuditRecords(ctx, req)
		if err != nil {
			return cf.callError(err)
		}
		for _, r := range resp.GetRecords() {
			key := r.GetKeyId()
			if key == "" && r.GetSessionId() != "" {
				key = "session " + r.GetSessionId()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.GetTime(), orDash(r.GetAccountId()), orDash(key), orDash(r.GetAddress()),
				r.GetAction(), orDash(r.GetTarget()), r.GetOutcome(), r.GetDetail())
			shown++
		}
		if resp.GetNextCursor() == "" || (*limit > 0 && shown >= *limit) {
			break
		}
		req.Cursor = resp.GetNextCursor()
	}
	return tw.Flush()
}
