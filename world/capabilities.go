package world

import (
	"context"
	"io"
	"time"
)

// The capabilities of a world.
//
// A world is whatever serves a client id: the engine held in this process
// (package world/embedded), a tabletop linked over the network, or a world
// hosted by another relay node. The relay's services see every kind through
// the same small interfaces, one per capability, and never through a
// concrete type: [World] is what every world offers (its description, its
// users and their permissions); everything else a world offers by
// implementing the capability's interface, and a service asks for it with
// [Capability]. A world that lacks a capability answers ErrUnimplemented,
// naming the operation and the world.
//
// Every argument and result of these interfaces is plain data of this
// package (or of world/dice), so that an implementation may send it across
// a network; a nil *User is GM-level access with no permission checks, and
// errors are the typed errors of errors.go, whose messages are meant for
// callers.

// World is one tabletop world, whatever serves it. Every method is safe for
// concurrent use.
type World interface {
	Info() Info
	UserDirectory
}

// UserDirectory is a world's users and what their roles allow.
type UserDirectory interface {
	// ResolveUser finds a user by id, then by case-insensitive name. An
	// unknown user is ErrInvalid with the text `User not found: <idOrName>`.
	ResolveUser(ctx context.Context, idOrName string) (*User, error)
	// Users lists the world's users.
	Users(ctx context.Context) ([]User, error)
	// Can reports whether the user holds a world permission (nil user: yes).
	Can(user *User, permission string) bool
}

// Documents reads and changes single documents: get, update, create,
// delete, and the document operations on actors and items (give, remove,
// increase and decrease, kill).
type Documents interface {
	Get(ctx context.Context, user *User, uuid string) (Document, error)
	// GetJSON is Get serialised as JSON; the bytes are shared and must not
	// be changed.
	GetJSON(ctx context.Context, user *User, uuid string) ([]byte, error)
	Update(ctx context.Context, user *User, uuid string, data Document) (Document, error)
	// UpdateJSON is Update with the result serialised as GetJSON would;
	// the bytes are shared and must not be changed.
	UpdateJSON(ctx context.Context, user *User, uuid string, data Document) ([]byte, error)
	Create(ctx context.Context, user *User, p CreateParams) (Document, error)
	Delete(ctx context.Context, user *User, uuid string) error
	Give(ctx context.Context, user *User, p GiveParams) (GiveResult, error)
	Remove(ctx context.Context, user *User, p RemoveParams) (RemoveResult, error)
	ModifyAttribute(ctx context.Context, user *User, uuid, attribute string, delta float64) (AttributeChange, error)
	Kill(ctx context.Context, user *User, uuid string) (KillResult, error)
}

// DocumentSearch finds documents by name.
type DocumentSearch interface {
	Search(ctx context.Context, user *User, p SearchParams) ([]Document, error)
}

// Folders is the folder tree: reading it, creating and deleting folders.
type Folders interface {
	Structure(ctx context.Context, user *User, p StructureParams) (Document, error)
	CreateFolder(ctx context.Context, user *User, p FolderParams) (Document, error)
	DeleteFolder(ctx context.Context, user *User, folderID string, deleteAll bool) (FolderDeletion, error)
}

// Selection is the tokens of the active scene that the table controls.
type Selection interface {
	// Select chooses tokens and returns the uuids of those now selected.
	Select(ctx context.Context, user *User, p SelectParams) ([]string, error)
	Selected(ctx context.Context, user *User) ([]SelectedToken, error)
}

// Encounters runs combat: encounters, their combatants and turn order.
type Encounters interface {
	// ListEncounters lists the world's encounters as the user may see them.
	ListEncounters(ctx context.Context, user *User) ([]Encounter, error)
	// StartEncounter creates an encounter, makes it the active one and
	// starts it at round 1.
	StartEncounter(ctx context.Context, user *User, p StartEncounterParams) (Encounter, error)
	// EndEncounter deletes an encounter (the active one when id is empty)
	// and returns its id.
	EndEncounter(ctx context.Context, user *User, encounterID string) (string, error)
	// NavigateEncounter moves an encounter (the active one when id is
	// empty) by a turn or a round.
	NavigateEncounter(ctx context.Context, user *User, encounterID string, action EncounterAction) (EncounterPosition, error)
	AddToEncounter(ctx context.Context, user *User, p EncounterMembersParams) (EncounterMembersResult, error)
	RemoveFromEncounter(ctx context.Context, user *User, p EncounterMembersParams) (EncounterMembersResult, error)
}

// Files is the world's file area: maps, token images and handouts, by path
// relative to the area's root. The caller's world permissions
// (FILES_BROWSE, FILES_UPLOAD) are checked before these are called.
type Files interface {
	// ListFiles lists a directory (see [ListFilesParams]) and returns its
	// cleaned path with the entries.
	ListFiles(ctx context.Context, user *User, p ListFilesParams) (string, []FileEntry, error)
	// OpenFile opens a file for reading; the caller closes its Body.
	OpenFile(ctx context.Context, user *User, path string) (*FileContent, error)
	// WriteFile stores what body yields, to its end, as one file,
	// atomically: on any failure nothing is left behind. An error from
	// body is returned as it is.
	WriteFile(ctx context.Context, user *User, p WriteFileParams, body io.Reader) (FileWritten, error)
}

// Scripts runs execute-js scripts against the world.
type Scripts interface {
	// ExecuteJS runs script as the body of an async function with the
	// tabletop's `game` API, acting as user.
	ExecuteJS(ctx context.Context, user *User, script string, opts ScriptOptions) (ScriptResult, error)
}

// Events follows what happens in the world as a stream of events.
type Events interface {
	// Subscribe starts a subscription; the caller closes it. Every event it
	// yields is already what user may read.
	Subscribe(ctx context.Context, user *User, req EventRequest) (EventSubscription, error)
}

// Dnd5e is the fifth-edition ruleset's operations on actors. Writes are
// each one transaction of the world; rolls are posted to chat as the
// parameters ask.
type Dnd5e interface {
	// ActorDetails returns the details asked for by name (`resources`,
	// `items`, `spells`, ...); unknown names are ignored.
	ActorDetails(ctx context.Context, user *User, actorUUID string, details []string) (ActorDetails, error)
	SkillCheck(ctx context.Context, user *User, p CheckParams) (RollResult, error)
	AbilitySave(ctx context.Context, user *User, p CheckParams) (RollResult, error)
	AbilityCheck(ctx context.Context, user *User, p CheckParams) (RollResult, error)
	DeathSave(ctx context.Context, user *User, p DeathSaveParams) (DeathSaveResult, error)
	ShortRest(ctx context.Context, user *User, p RestParams) (RestResult, error)
	LongRest(ctx context.Context, user *User, p RestParams) (RestResult, error)
	ModifyItemCharges(ctx context.Context, user *User, actorUUID string, item ItemRef, amount int) (ChargesResult, error)
	ModifyExperience(ctx context.Context, user *User, actor ActorRef, amount int) (ExperienceChange, error)
	ModifyCurrency(ctx context.Context, user *User, actorUUID, denomination string, amount int) (CurrencyChange, error)
	TransferCurrency(ctx context.Context, user *User, p TransferParams) (TransferResult, error)
	GetConcentration(ctx context.Context, user *User, actor ActorRef) (Concentration, error)
	BreakConcentration(ctx context.Context, user *User, actor ActorRef) (BrokenConcentration, error)
	ConcentrationSave(ctx context.Context, user *User, p ConcentrationSaveParams) (ConcentrationSaveResult, error)
	EquipItem(ctx context.Context, user *User, actor ActorRef, item ItemRef, equipped bool) (ItemToggleResult, error)
	AttuneItem(ctx context.Context, user *User, actor ActorRef, item ItemRef, attuned bool) (ItemToggleResult, error)
	PrepareSpell(ctx context.Context, user *User, actorUUID, spellName string, prepared bool) (PrepareResult, error)
	// Use uses an ability, a feature, a spell or an item (by p.Kind).
	Use(ctx context.Context, user *User, p UseParams) (UseResult, error)
}

// Capability returns w as the capability C (one of the interfaces above),
// or, when w does not offer it, ErrUnimplemented naming the operation
// asked for and the world: `World 'demo' does not offer dnd5e/short-rest`.
func Capability[C any](w World, operation string) (C, error) {
	if c, ok := w.(C); ok {
		return c, nil
	}
	var none C
	return none, Errorf(ErrUnimplemented, "World '%s' does not offer %s", w.Info().ClientID, operation)
}

// ScriptOptions tune a script run.
type ScriptOptions struct {
	// Timeout is the time limit of the whole run; the world's default when
	// zero.
	Timeout time.Duration
}

// ScriptResult is what a script produced.
type ScriptResult struct {
	// Value is the script's return value as a JSON value: nil, bool,
	// float64, string, []any or map[string]any.
	Value any
	// Logs are the console entries, oldest first.
	Logs []string
	// LogsTruncated reports that console output was dropped or shortened.
	LogsTruncated bool
}

// ListFilesParams select what a listing shows.
type ListFilesParams struct {
	// Path is the directory, relative to the area's root; empty is the
	// root.
	Path string
	// Recursive descends into sub-directories down to Depth levels (the
	// world's default when 0; 1 is the directory alone).
	Recursive bool
	Depth     int
}

// FileEntry is a file or directory of a world's file area.
type FileEntry struct {
	Name     string // the last path segment
	Path     string // relative to the area's root
	Type     string // "file" or "directory"
	Size     int64  // 0 for directories
	Modified time.Time
}

// FileContent is a file opened for reading.
type FileContent struct {
	Path     string // relative to the area's root
	Name     string // the last path segment
	MIMEType string
	// Size is the file's size when it was opened; a body that yields
	// another number of bytes means the file changed meanwhile.
	Size int64
	// Body streams the file's bytes; the caller closes it.
	Body io.ReadCloser
}

// WriteFileParams name a file to write.
type WriteFileParams struct {
	// Dir is the directory (created with its missing parents), Name the
	// file's name in it.
	Dir, Name string
	// Overwrite replaces an existing file; without it an existing file is
	// ErrConflict.
	Overwrite bool
	// MaxBytes bounds the file's size; over it the write is ErrTooLarge
	// and leaves nothing. Zero or less means no limit.
	MaxBytes int64
}

// FileWritten reports a finished write.
type FileWritten struct {
	Path string // relative to the area's root
	Size int64
}
