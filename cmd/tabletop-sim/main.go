// Command tabletop-sim is a simulated tabletop: it pairs with a relay and
// connects to it as the tabletop's REST API module does, so that a linked
// world can be tried without a real tabletop.
//
//	relay worlds pair-code                        # prints a code, say K7QF3M
//	tabletop-sim --relay http://127.0.0.1:8080 --code K7QF3M
//
// Or, as the module's "pair in the browser": --pair-request opens a pair
// request, prints the console page where a game master approves it, and
// pairs once it is approved.
//
// It keeps its clientId, token and server fingerprint in a state file
// (--state), as the module keeps them in the world's settings, so it
// reconnects after a restart without a new code. It reconnects as the
// module does (backoff up to 30 s; it stops for good when the relay
// revokes its token). Requests are answered by a small handler: the world's
// description (`world-info`) and users (`players`); every other request
// type gets no reply, as the module does for a type it does not handle.
// With --world it answers every request type the relay sends from a copy
// of the demo world kept in that directory (created on the first run), in
// the module's reply shapes and error texts, with the demo world's users,
// and sends the world's events in the module's shapes on the channels the
// relay turns on; the world then carries the demo world's title unless
// --title names another.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/embedded"
	"github.com/tabletop-relay/relay/world/events"
)

// state is what the simulator keeps between runs.
type state struct {
	ClientID          string `json:"clientId"`
	Token             string `json:"token"`
	ServerFingerprint string `json:"serverFingerprint"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "tabletop-sim:", err)
		os.Exit(1)
	}
}

// run parses the flags, pairs when given a code, and stays connected until
// ctx ends or the relay refuses the simulator for good.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fset := flag.NewFlagSet("tabletop-sim", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		relayURL  = fset.String("relay", "http://127.0.0.1:8080", "the relay's `address` (http(s):// or the module's ws(s)://)")
		code      = fset.String("code", "", "a pairing `code` from `relay worlds pair-code`; without one, the simulator connects with the token in --state")
		stateFile = fset.String("state", "tabletop-sim.json", "`file` keeping the clientId, token and server fingerprint between runs (mode 0600)")
		worldID   = fset.String("world-id", "sim-world", "the tabletop's id of the world")
		title     = fset.String("title", "Simulated World", "the world's title (with --world, the demo world's title unless this is given)")
		system    = fset.String("system", "dnd5e", "the game system's id")
		logLevel  = fset.String("log-level", "info", "`level`: debug, info, warn or error")
		request   = fset.Bool("pair-request", false, "pair by approval in the browser: open a pair request, print the page to approve it at, and wait for the approval")
		worldDir  = fset.String("world", "", "`directory` of a copy of the demo world to answer every request from (created on first use); without it only world-info and players are answered")
	)
	if err := fset.Parse(args); err != nil {
		return err
	}
	titleGiven := false
	fset.Visit(func(f *flag.Flag) { titleGiven = titleGiven || f.Name == "title" })
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))

	st, err := loadState(*stateFile)
	if err != nil {
		return err
	}
	if st.ServerFingerprint == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		st.ServerFingerprint = hex.EncodeToString(b[:])
	}
	players := []link.Player{
		{ID: "simGamemaster001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true},
		{ID: "simPlayer0000001", Name: "Player", Role: world.RolePlayer},
	}
	cfg := linktest.Config{
		RelayURL: *relayURL, WorldID: *worldID, WorldTitle: *title, FoundryVersion: "13.345",
		SystemID: *system, SystemVersion: "5.0.4", ServerFingerprint: st.ServerFingerprint,
		Players: players, Log: log,
	}
	cfg.Handler = linktest.ByType(map[string]linktest.Handler{
		"world-info": func(context.Context, linktest.Request) (any, bool) {
			return map[string]any{"data": map[string]any{"id": *worldID, "title": *title, "system": *system, "foundryVersion": cfg.FoundryVersion}}, true
		},
		"players": func(context.Context, linktest.Request) (any, bool) {
			return map[string]any{"data": map[string]any{"users": players}}, true
		},
	})
	var mirrored world.World // the world whose events the simulator sends
	if *worldDir != "" {
		w, closeWorld, err := demoWorld(ctx, *worldDir)
		if err != nil {
			return err
		}
		defer closeWorld()
		if cfg.Players, err = linktest.Players(ctx, w); err != nil {
			return err
		}
		// The copy of the demo world lends its title only when the
		// operator named none: an explicit --title is what they want the
		// relay to show.
		if !titleGiven {
			cfg.WorldTitle = w.Info().Title
		}
		cfg.Handler = linktest.WorldHandler(w)
		mirrored = w
	}
	tt := linktest.New(cfg)
	tt.SetCredentials(st.ClientID, st.Token)
	if mirrored != nil {
		stopEvents, err := tt.MirrorEvents(ctx, mirrored)
		if err != nil {
			return err
		}
		defer stopEvents()
	}
	if *code != "" || *request {
		var res linktest.PairResult
		if *request {
			res, err = tt.PairByRequest(ctx, 2*time.Second, func(pr linktest.PairRequest) {
				fmt.Fprintf(stderr, "Approve the pairing of this world at %s (code %s, until %s)\n", pr.PairURL, pr.Code, pr.ExpiresAt)
			})
		} else {
			res, err = tt.Pair(ctx, *code)
		}
		if err != nil {
			return fmt.Errorf("pair: %w", err)
		}
		st.ClientID, st.Token = res.ClientID, res.Token
		if err := saveState(*stateFile, st); err != nil {
			return err
		}
		log.Info("paired", "clientId", res.ClientID, "relayUrl", res.RelayURL)
	}
	if st.Token == "" {
		return errors.New("no token: pair first with --code (relay worlds pair-code prints one)")
	}
	log.Info("connecting", "url", tt.ConnectURL())
	go func() {
		// Report the connection once it is up.
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if tt.WaitFor(waitCtx, func(t *linktest.Tabletop) bool { return t.Connected() }) == nil {
			log.Info("connected", "clientId", st.ClientID)
		}
	}()
	err = tt.Run(ctx)
	if _, token := tt.Credentials(); token == "" && st.Token != "" {
		// The relay revoked the token: forget it, as the module does.
		st.Token = ""
		_ = saveState(*stateFile, st)
	}
	return err
}

// loadState reads the state file; a missing file is an empty state.
func loadState(path string) (state, error) {
	var st state
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("read %s: %w", path, err)
	}
	return st, nil
}

// saveState writes the state file, readable by its owner only: it holds
// the connection token.
func saveState(path string, st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o600)
}

// demoWorld opens the copy of the demo world in dir, creating it (with its
// files) on first use, with an event hub of its own.
func demoWorld(ctx context.Context, dir string) (world.World, func(), error) {
	hub := events.New(events.Options{})
	host, err := world.OpenHost(dir, world.Options{Journal: hub})
	if err != nil {
		hub.Close()
		return nil, nil, err
	}
	host.Watch(hub.Committed)
	ids, err := host.IDs(ctx)
	if err != nil {
		host.Close()
		hub.Close()
		return nil, nil, err
	}
	if !slices.Contains(ids, demo.ClientID) {
		seed, err := demo.Seed()
		if err == nil {
			_, err = host.Create(ctx, demo.ClientID, seed)
		}
		if err == nil {
			err = os.CopyFS(filepath.Join(dir, "worlds", demo.ClientID, "files"), demo.Files())
		}
		if err != nil {
			host.Close()
			hub.Close()
			return nil, nil, fmt.Errorf("create the demo world in %s: %w", dir, err)
		}
	}
	w, err := embedded.NewRegistry(host, embedded.Options{DataDir: dir, Hub: hub}).World(ctx, demo.ClientID)
	if err != nil {
		host.Close()
		hub.Close()
		return nil, nil, err
	}
	return w, func() { hub.Close(); host.Close() }, nil
}
