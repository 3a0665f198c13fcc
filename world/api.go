// Package world is the vocabulary every kind of tabletop world shares, and
// the world engine that the relay holds in its own process.
//
// The vocabulary: a world is seen through small interfaces, one per
// capability (capabilities.go): [World] (its description, users and
// permissions) is what every world offers; [Documents], [DocumentSearch],
// [Folders], [Selection], [Encounters], [Files], [Dnd5e], [Scripts] and
// [Events] are what a world may offer, asked for with [Capability], which
// names the operation and the world when the world lacks it
// (ErrUnimplemented). Their arguments and results are plain data of this
// package (api.go, encounters.go, ruleset.go, subscriptions.go,
// capabilities.go), so that a world in another process (a tabletop linked
// over the network, a world hosted by another relay node) can implement
// them; errors are typed (errors.go).
//
// The engine: [Engine] keeps one world's documents in memory, writes them
// through to SQLite, applies the permission rules and offers transactions
// ([Engine.Mutate]) to the rules built on it; [Host] keeps the engines of
// one relay's data directory. The package knows nothing about gRPC, HTTP or
// protobuf. Callers hand it a resolved [User] (or nil for GM-level access
// with no permission checks) and plain Go values. Package world/embedded
// turns an engine into a world offering every capability, with the
// fifth-edition rules (world/dnd5e), encounters (world/combat), the event
// hub (world/events), the file area (world/files) and scripts
// (world/script).
package world

import "time"

// Role is a tabletop user's role. The numbers are the tabletop's own.
type Role int

// The roles a user can have. A user whose role is RoleAssistant or higher is a
// GM for every permission rule.
const (
	RoleNone       Role = 0
	RolePlayer     Role = 1
	RoleTrusted    Role = 2
	RoleAssistant  Role = 3
	RoleGamemaster Role = 4
)

// Level is a user's permission level on one document. The numbers are the
// tabletop's own ownership values.
type Level int

// The document permission levels, weakest first.
const (
	LevelNone     Level = 0
	LevelLimited  Level = 1
	LevelObserver Level = 2
	LevelOwner    Level = 3
)

// World permissions checked by the relay's policy layer. The world maps each to
// the lowest role that holds it (a world setting).
const (
	PermissionFilesBrowse = "FILES_BROWSE"
	PermissionFilesUpload = "FILES_UPLOAD"
)

// User is a tabletop user of one world.
type User struct {
	ID   string
	Name string
	Role Role
}

// IsGM reports whether the user counts as a GM (role ASSISTANT or higher).
// A nil user stands for GM-level access and is a GM too.
func (u *User) IsGM() bool { return u == nil || u.Role >= RoleAssistant }

// Document is a document's source data in the tabletop's JSON shape
// (`_id`, `name`, `type`, `img`, `system`, `items`, `effects`, `folder`,
// `sort`, `ownership`, `flags`, `_stats`). Values are JSON-compatible:
// string, float64, bool, nil, []any and map[string]any. A Document returned by
// the world belongs to the caller and may be changed freely.
type Document = map[string]any

// Info describes a world.
type Info struct {
	ClientID string
	Title    string
	System   string

	// The fields below describe how the world is served, for listings
	// (GET /clients); registries fill them in, a world's own Info may
	// leave them empty.

	// Kind is KindEmbedded or KindLinked.
	Kind string
	// Online reports whether the world can serve requests now.
	Online bool
	// Name is a name to pick the world by: a linked connection's custom
	// name, else the title.
	Name string
	// WorldID is the tabletop's own id of the world (the client id for an
	// embedded world).
	WorldID string
	// SystemVersion and TabletopVersion are what a linked tabletop
	// reported.
	SystemVersion, TabletopVersion string
	// ConnectedAt is when a linked world's connection was made (zero while
	// it is not connected); LastSeen when the relay last heard from it.
	ConnectedAt, LastSeen time.Time
}

// The kinds of world, for [Info].Kind.
const (
	KindEmbedded = "embedded"
	KindLinked   = "linked"
)

// CreateParams describes a new document.
type CreateParams struct {
	// Type is the document name: Actor, Item, Scene, JournalEntry, Macro, or,
	// with ParentUUID, an embedded type (Item and ActiveEffect on an Actor,
	// Token on a Scene, JournalEntryPage on a JournalEntry).
	Type string
	// Data is the new document's source data; `_id` is kept only with KeepID.
	Data Document
	// Folder is a folder id; it overrides any folder inside Data.
	Folder string
	// ParentUUID makes the new document an embedded one of that parent.
	ParentUUID string
	// KeepID keeps Data's `_id` (which must be free and well formed).
	KeepID bool
}

// SearchParams selects documents by name.
type SearchParams struct {
	Query string
	// Filter is either a document type ("Actor") or comma-separated key:value
	// pairs ("documentType:Actor,folder:abc").
	Filter string
	// Limit caps the results; zero means the default (200), at most 500.
	Limit int
}

// StructureParams selects part of the folder tree.
type StructureParams struct {
	// Types are document names to include; empty means all folder-able types.
	Types []string
	// Path is empty (the root) or `Folder.<id>`.
	Path string
	// Recursive descends into sub-folders up to Depth levels (default 5).
	Recursive bool
	Depth     int
	// IncludeData returns each document's full data instead of a summary.
	IncludeData bool
}

// GiveParams moves or copies an item to an actor.
type GiveParams struct {
	FromUUID string // optional source actor; without it the item is copied
	ToUUID   string
	ItemUUID string
	ItemName string
	Quantity float64 // zero means 1
}

// GiveResult reports a give.
type GiveResult struct {
	FromUUID    string
	ToUUID      string
	ItemUUID    string  // the item as requested
	NewItemUUID string  // the item on the target actor
	Quantity    float64 // the target item's quantity afterwards
}

// RemoveParams removes an item, or part of a stack, from an actor.
type RemoveParams struct {
	ActorUUID string
	ItemUUID  string
	ItemName  string
	Quantity  float64 // zero removes the whole item
}

// RemoveResult reports a remove.
type RemoveResult struct {
	ActorUUID string
	ItemUUID  string
	Quantity  float64 // what is left; 0 when the item was deleted
	Deleted   bool
}

// AttributeChange reports a numeric attribute change.
type AttributeChange struct {
	UUID      string
	Attribute string
	OldValue  float64
	NewValue  float64
}

// KillResult reports a document marked defeated.
type KillResult struct {
	UUID    string
	Message string
}

// FolderParams describes a new folder.
type FolderParams struct {
	Name     string
	Type     string // the document type the folder holds, e.g. Actor
	ParentID string
	ID       string // optional; an existing folder with this id is returned unchanged
}

// FolderDeletion reports a folder deletion.
type FolderDeletion struct {
	FolderID        string
	EntitiesDeleted int
	FoldersDeleted  int
}

// SelectParams chooses tokens of the active scene to control.
type SelectParams struct {
	UUIDs     []string
	Name      string
	All       bool
	Overwrite bool     // release every controlled token first
	Match     Document // every key must equal; `actor.` keys read the token's actor
}

// SelectedToken is one controlled token.
type SelectedToken struct {
	TokenUUID string
	ActorUUID string // empty when the token has no actor
}

// Change is one committed change to one document, handed to the commit hook
// after the transaction that made it has committed. Before is nil for a
// creation and After is nil for a deletion. Embedded documents appear as their
// own changes (with their own uuid) as well as changes of their parent.
// Before and After are the world's own stored documents, shared and
// immutable: read them, never change them.
type Change struct {
	Op           ChangeOp
	UUID         string
	DocumentName string
	Before       Document
	After        Document
}

// ChangeOp is the kind of a [Change].
type ChangeOp int

// The kinds of change.
const (
	ChangeCreate ChangeOp = iota + 1
	ChangeUpdate
	ChangeDelete
)

// Options tune a world. The zero value works.
type Options struct {
	// Clock returns the current time; time.Now when nil.
	Clock func() time.Time
	// NewID returns a fresh 16-character document id; random when nil.
	NewID func() string
	// OnCommit, when set, is called after every committed transaction with
	// its changes, once, in commit order, by the world's committer (so
	// calls never interleave): after the changes are durable and visible
	// to readers, before the transaction's Mutate returns. It must not
	// block, nor write to the world.
	OnCommit func(changes []Change)
	// Journal, when set, keeps records about each transaction's changes in
	// the world's database, written in the same SQLite transaction (see
	// journal.go). The event hub keeps its sequence and resume window there.
	Journal Journal
	// Limits bound the size and shape of what the world stores; the zero
	// value takes the defaults.
	Limits Limits
	// ObserveCommit, when set, is told how long each group commit's SQLite
	// write took (its one transaction and fsync) and how many transactions
	// it carried, by the world's committer; it must not block. The metrics
	// endpoint keeps a histogram of it.
	ObserveCommit func(d time.Duration, transactions int)
	// CommitDelay is how long a transaction may wait for others to join
	// its group commit (one SQLite transaction and fsync for all of them)
	// when writers are concurrent; a lone writer never waits. Zero or less
	// writes every group at once. See DefaultCommitDelay.
	CommitDelay time.Duration
	// Replicator, when set (a cluster's embedded worlds), takes every
	// group before any of its transactions is acknowledged (see
	// replicate.go). A relay alone leaves it nil.
	Replicator Replicator
}
