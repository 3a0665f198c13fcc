package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthCommand runs `relay health`: it asks a running relay's /healthz
// (is it up) and /readyz (may it take traffic) and succeeds only when both
// answer 200. A container image without a shell or curl runs it as its
// health check.
func healthCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay health", flag.ContinueOnError)
	fset.SetOutput(stderr)
	addr := fset.String("addr", envOr("RELAY_ADDR", "127.0.0.1:8080"), "`host:port` of the running relay (RELAY_ADDR)")
	timeout := fset.Duration("timeout", 5*time.Second, "how long to wait for each answer")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay health [flags]\n\nSucceeds when the relay at --addr answers 200 on /healthz and /readyz.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fset.Arg(0))}
	}
	client := &http.Client{Timeout: *timeout}
	for _, path := range []string{"/healthz", "/readyz"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+path, nil)
		if err != nil {
			return usageError{fmt.Sprintf("--addr %q: %v", *addr, err)}
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %d", path, resp.StatusCode)
		}
	}
	fmt.Fprintf(stdout, "relay at %s is healthy and ready\n", *addr)
	return nil
}
