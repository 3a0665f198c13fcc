// Package embedded is the relay's own kind of world: a world engine
// ([world.Engine]) held in this process, offering every capability of the
// world vocabulary (see package world):
//
//	world.World, world.Documents, world.DocumentSearch,
//	world.Folders, world.Selection   the engine's own operations
//	world.Dnd5e                      the fifth-edition rules (world/dnd5e)
//	world.Encounters                 encounters and turn order (world/combat)
//	world.Events                     the event hub (world/events)
//	world.Files                      the world's file area (world/files)
//	world.Scripts                    execute-js (world/script)
//
// The ruleset, combat, event, file and script packages work on the engine
// itself (its views and transactions); this package is the one place that
// applies them to a world, so the relay's services never see the engine.
// [Registry] resolves a client id to its embedded world, as the services'
// registry of worlds.
package embedded

import (
	"context"
	"io"
	"sync"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/combat"
	"github.com/tabletop-relay/relay/world/dice"
	"github.com/tabletop-relay/relay/world/dnd5e"
	"github.com/tabletop-relay/relay/world/events"
	"github.com/tabletop-relay/relay/world/files"
	"github.com/tabletop-relay/relay/world/script"
)

// Options configure the embedded worlds. The zero value works: no file
// area, no event streams, no scripts, random dice.
type Options struct {
	// DataDir is the relay's data directory: each world's file area is
	// `<DataDir>/worlds/<clientId>/files`. Without it file operations
	// answer ErrUnavailable.
	DataDir string
	// Hub publishes the worlds' events; without it the worlds offer no
	// event streams (ErrUnimplemented).
	Hub *events.Hub
	// Dice rolls for the ruleset and for initiative; nil rolls with the
	// operating system's randomness (dice.NewRandom).
	Dice dice.Source
	// Scripts runs execute-js scripts (the relay's is a *script.Pool,
	// which runs each in a worker process with a hard time limit and
	// memory ceiling); without it execute-js answers ErrUnavailable rather
	// than run scripts without their hard limits.
	Scripts ScriptRunner
}

// ScriptRunner runs execute-js scripts against a world.
type ScriptRunner interface {
	Run(ctx context.Context, w script.World, user *world.User, src string, opts script.Options) (script.Result, error)
}

// Registry resolves client ids to the embedded worlds of one [world.Host].
// It is safe for concurrent use.
type Registry struct {
	host *world.Host
	kit  *kit

	// worlds keeps each world's wrapper, by client id, for as long as its
	// engine stays open, so that resolving a world allocates nothing.
	worlds sync.Map
}

// NewRegistry returns the registry of the worlds host keeps.
func NewRegistry(host *world.Host, opts Options) *Registry {
	return &Registry{host: host, kit: newKit(opts)}
}

// World returns the world serving clientID, opening it on first use. An
// unknown world is ErrNotFound `Unknown world: <clientId>`.
func (r *Registry) World(ctx context.Context, clientID string) (world.World, error) {
	eng, err := r.host.World(ctx, clientID)
	if err != nil {
		return nil, err
	}
	if w, ok := r.worlds.Load(clientID); ok && w.(*World).Engine == eng {
		return w.(*World), nil
	}
	// A world reopened after it was closed has a new engine: its wrapper
	// replaces the old one.
	w := r.kit.wrap(eng)
	r.worlds.Store(clientID, w)
	return w, nil
}

// List describes every world, sorted by client id, as embedded worlds,
// always online.
func (r *Registry) List(ctx context.Context) ([]world.Info, error) {
	infos, err := r.host.List(ctx)
	for i := range infos {
		info := &infos[i]
		info.Kind, info.Online, info.Name, info.WorldID = world.KindEmbedded, true, info.Title, info.ClientID
	}
	return infos, err
}

// IDs lists the worlds' client ids, cheaply.
func (r *Registry) IDs(ctx context.Context) ([]string, error) { return r.host.IDs(ctx) }

// kit is what every embedded world shares: the rules and the encounter
// manager hold nothing of a world's own.
type kit struct {
	opts       Options
	rules      *dnd5e.Rules
	encounters *combat.Manager
}

func newKit(opts Options) *kit {
	if opts.Dice == nil {
		opts.Dice = dice.NewRandom()
	}
	return &kit{opts: opts, rules: dnd5e.New(opts.Dice), encounters: combat.New(opts.Dice.Roll)}
}

// wrap makes an engine an embedded world.
func (k *kit) wrap(eng *world.Engine) *World { return &World{Engine: eng, kit: k} }

// World is an engine as a world offering every capability. The engine's own
// methods (documents, search, folders, selection, users) are its own; the
// others apply the ruleset, combat, event, file and script packages to it.
type World struct {
	*world.Engine
	kit *kit
}

// Every capability, checked by the compiler.
var (
	_ world.World          = (*World)(nil)
	_ world.Documents      = (*World)(nil)
	_ world.DocumentSearch = (*World)(nil)
	_ world.Folders        = (*World)(nil)
	_ world.Selection      = (*World)(nil)
	_ world.Encounters     = (*World)(nil)
	_ world.Files          = (*World)(nil)
	_ world.Scripts        = (*World)(nil)
	_ world.Events         = (*World)(nil)
	_ world.Dnd5e          = (*World)(nil)
)

// Encounters (world/combat).

// ListEncounters implements [world.Encounters].
func (w *World) ListEncounters(ctx context.Context, user *world.User) ([]world.Encounter, error) {
	return w.kit.encounters.List(ctx, w.Engine, user)
}

// StartEncounter implements [world.Encounters].
func (w *World) StartEncounter(ctx context.Context, user *world.User, p world.StartEncounterParams) (world.Encounter, error) {
	return w.kit.encounters.Start(ctx, w.Engine, user, p)
}

// EndEncounter implements [world.Encounters].
func (w *World) EndEncounter(ctx context.Context, user *world.User, encounterID string) (string, error) {
	return w.kit.encounters.End(ctx, w.Engine, user, encounterID)
}

// NavigateEncounter implements [world.Encounters].
func (w *World) NavigateEncounter(ctx context.Context, user *world.User, encounterID string, action world.EncounterAction) (world.EncounterPosition, error) {
	return w.kit.encounters.Navigate(ctx, w.Engine, user, encounterID, action)
}

// AddToEncounter implements [world.Encounters].
func (w *World) AddToEncounter(ctx context.Context, user *world.User, p world.EncounterMembersParams) (world.EncounterMembersResult, error) {
	return w.kit.encounters.Add(ctx, w.Engine, user, p)
}

// RemoveFromEncounter implements [world.Encounters].
func (w *World) RemoveFromEncounter(ctx context.Context, user *world.User, p world.EncounterMembersParams) (world.EncounterMembersResult, error) {
	return w.kit.encounters.Remove(ctx, w.Engine, user, p)
}

// Files (world/files).

// area returns the world's file area.
func (w *World) area() (*files.Area, error) {
	return files.Of(w.kit.opts.DataDir, w.Info().ClientID)
}

// ListFiles implements [world.Files].
func (w *World) ListFiles(ctx context.Context, _ *world.User, p world.ListFilesParams) (string, []world.FileEntry, error) {
	area, err := w.area()
	if err != nil {
		return "", nil, err
	}
	dir, entries, err := area.List(ctx, p.Path, p.Recursive, p.Depth)
	if err != nil {
		return "", nil, err
	}
	out := make([]world.FileEntry, len(entries))
	for i, e := range entries {
		out[i] = world.FileEntry{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Modified: e.Modified}
	}
	return dir, out, nil
}

// OpenFile implements [world.Files].
func (w *World) OpenFile(_ context.Context, _ *world.User, path string) (*world.FileContent, error) {
	area, err := w.area()
	if err != nil {
		return nil, err
	}
	f, err := area.Open(path)
	if err != nil {
		return nil, err
	}
	return &world.FileContent{Path: f.Path, Name: f.Name, MIMEType: f.MIMEType, Size: f.Size, Body: f.File}, nil
}

// WriteFile implements [world.Files].
func (w *World) WriteFile(ctx context.Context, _ *world.User, p world.WriteFileParams, body io.Reader) (world.FileWritten, error) {
	area, err := w.area()
	if err != nil {
		return world.FileWritten{}, err
	}
	o := files.WriteOptions{Overwrite: p.Overwrite, MaxBytes: p.MaxBytes}
	if w.ReplicatesFiles() {
		// In a cluster the file is in the world's replicated log before
		// it is in the area, and so before the upload is acknowledged.
		o.Record = func(ctx context.Context, f files.Pending) error {
			return w.RecordFile(ctx, f.Path, f.Digest, f.Size, f.Open)
		}
	}
	written, err := area.Write(ctx, p.Dir, p.Name, body, o)
	if err != nil {
		return world.FileWritten{}, err
	}
	return world.FileWritten{Path: written.Path, Size: written.Size}, nil
}

// Scripts (world/script).

// ExecuteJS implements [world.Scripts]: the script runner runs the script
// against the engine.
func (w *World) ExecuteJS(ctx context.Context, user *world.User, src string, opts world.ScriptOptions) (world.ScriptResult, error) {
	runner := w.kit.opts.Scripts
	if runner == nil {
		return world.ScriptResult{}, world.Errorf(world.ErrUnavailable, "execute-js is not available on this relay")
	}
	res, err := runner.Run(ctx, w.Engine, user, src, script.Options{Timeout: opts.Timeout})
	return world.ScriptResult{Value: res.Value, Logs: res.Logs, LogsTruncated: res.LogsTruncated}, err
}
