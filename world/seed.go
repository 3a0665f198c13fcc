package world

// Seed is the initial content of a new world, in the tabletop's source-data
// shape. It is read from JSON (see world/demo for the demo world's seed).
// Every document must carry its `_id` (16 characters, letters and digits);
// embedded documents (an actor's `items` and `effects`, a scene's `tokens`, a
// journal entry's `pages`) sit inside their parent as in the tabletop's own
// exports.
type Seed struct {
	Title  string `json:"title"`
	System string `json:"system"`
	// Permissions maps a world permission (FILES_BROWSE, FILES_UPLOAD,
	// ACTOR_CREATE, ITEM_CREATE, JOURNAL_CREATE, MACRO_SCRIPT, ...) to the
	// lowest role that holds it. Missing permissions are GM-only.
	Permissions map[string]Role `json:"permissions"`
	// Settings are world settings by `<namespace>.<key>` (see
	// [Engine.Setting]), such as `dnd5e.initiativeDexTiebreaker`.
	Settings map[string]any `json:"settings"`
	// Users are documents with `_id`, `name` and `role` (a [Role] number).
	Users          []Document `json:"users"`
	Folders        []Document `json:"folders"`
	Actors         []Document `json:"actors"`
	Items          []Document `json:"items"`
	Scenes         []Document `json:"scenes"`
	JournalEntries []Document `json:"journal"`
	Macros         []Document `json:"macros"`
	Combats        []Document `json:"combats"`
}
