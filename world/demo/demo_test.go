package demo

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/world"
)

// Fixed ids used by the README and the manual's examples. Changing one of them is a breaking change
// for the documentation, so the tests pin them.
const (
	gmID     = "gamemaster000001"
	aliceID  = "aliceUser0000001"
	bobID    = "bobUser000000001"
	tessID   = "tessUser00000001"
	ariaID   = "ariaVale00000001"
	bromID   = "bromIronfist0001"
	goblinID = "goblin0000000001"
	guardID  = "townGuard0000001"
	maraID   = "innkeeperMara001"

	heroesFolderID   = "heroesFolder0001"
	monstersFolderID = "monstersFolder01"
	treasureFolderID = "treasureFolder01"

	sceneID   = "tavernScene00001"
	journalID = "welcomeJournal01"
	pageID    = "welcomePage00001"
	macroID   = "rollInitMacro001"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9]{16}$`)

var skillAbilities = map[string]string{
	"acr": "dex", "ani": "wis", "arc": "int", "ath": "str", "dec": "cha", "his": "int",
	"ins": "wis", "itm": "cha", "inv": "int", "med": "wis", "nat": "int", "prc": "wis",
	"prf": "cha", "per": "cha", "rel": "int", "slt": "dex", "ste": "dex", "sur": "wis",
}

var abilityKeys = []string{"str", "dex", "con", "int", "wis", "cha"}

// itemKeys are exactly the fields of an item's source data, as the relay's
// get-actor-details returns them.
var itemKeys = []string{"_id", "_stats", "effects", "flags", "folder", "img", "name", "ownership", "sort", "system", "type"}

func mustSeed(t *testing.T) world.Seed {
	t.Helper()
	s, err := Seed()
	if err != nil {
		t.Fatalf("Seed: %v", err)
	}
	return s
}

// at follows a dot-separated path through nested objects and arrays (array
// elements are named by their index).
func at(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func get(t *testing.T, v any, path string) any {
	t.Helper()
	got, ok := at(v, path)
	if !ok {
		t.Fatalf("%s: missing", path)
	}
	return got
}

func num(t *testing.T, v any, path string) float64 {
	t.Helper()
	f, ok := get(t, v, path).(float64)
	if !ok {
		t.Fatalf("%s = %#v, want a number", path, get(t, v, path))
	}
	return f
}

func str(t *testing.T, v any, path string) string {
	t.Helper()
	s, ok := get(t, v, path).(string)
	if !ok {
		t.Fatalf("%s = %#v, want a string", path, get(t, v, path))
	}
	return s
}

func boolean(t *testing.T, v any, path string) bool {
	t.Helper()
	b, ok := get(t, v, path).(bool)
	if !ok {
		t.Fatalf("%s = %#v, want a boolean", path, get(t, v, path))
	}
	return b
}

func list(t *testing.T, v any, path string) []any {
	t.Helper()
	l, ok := get(t, v, path).([]any)
	if !ok {
		t.Fatalf("%s = %#v, want an array", path, get(t, v, path))
	}
	return l
}

func strs(t *testing.T, v any, path string) []string {
	t.Helper()
	var out []string
	for i, e := range list(t, v, path) {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("%s[%d] = %#v, want a string", path, i, e)
		}
		out = append(out, s)
	}
	return out
}

func wantNum(t *testing.T, v any, path string, want float64) {
	t.Helper()
	if got := num(t, v, path); got != want {
		t.Errorf("%s = %v, want %v", path, got, want)
	}
}

func wantStr(t *testing.T, v any, path, want string) {
	t.Helper()
	if got := str(t, v, path); got != want {
		t.Errorf("%s = %q, want %q", path, got, want)
	}
}

func wantBool(t *testing.T, v any, path string, want bool) {
	t.Helper()
	if got := boolean(t, v, path); got != want {
		t.Errorf("%s = %v, want %v", path, got, want)
	}
}

func byID(t *testing.T, docs []world.Document, id string) world.Document {
	t.Helper()
	for _, d := range docs {
		if d["_id"] == id {
			return d
		}
	}
	t.Fatalf("no document with _id %q", id)
	return nil
}

func embedded(t *testing.T, parent world.Document, key string) []world.Document {
	t.Helper()
	var out []world.Document
	for i, e := range list(t, parent, key) {
		d, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("%s[%d] is %T, want an object", key, i, e)
		}
		out = append(out, d)
	}
	return out
}

func byName(t *testing.T, docs []world.Document, name string) world.Document {
	t.Helper()
	var found world.Document
	for _, d := range docs {
		if d["name"] == name {
			if found != nil {
				t.Fatalf("two documents named %q", name)
			}
			found = d
		}
	}
	if found == nil {
		t.Fatalf("no document named %q", name)
	}
	return found
}

func ownership(t *testing.T, d world.Document) map[string]float64 {
	t.Helper()
	m, ok := d["ownership"].(map[string]any)
	if !ok {
		t.Fatalf("%v: ownership = %#v, want an object", d["_id"], d["ownership"])
	}
	out := map[string]float64{}
	for k, v := range m {
		f, ok := v.(float64)
		if !ok {
			t.Fatalf("%v: ownership.%s = %#v, want a number", d["_id"], k, v)
		}
		out[k] = f
	}
	return out
}

// topLevel lists every top-level document with its collection name.
func topLevel(s world.Seed) map[string][]world.Document {
	return map[string][]world.Document{
		"users":   s.Users,
		"folders": s.Folders,
		"actors":  s.Actors,
		"items":   s.Items,
		"scenes":  s.Scenes,
		"journal": s.JournalEntries,
		"macros":  s.Macros,
		"combats": s.Combats,
	}
}

func TestSeedDecodesStrictly(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(seedJSON))
	dec.DisallowUnknownFields()
	var s world.Seed
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("demo.json does not decode strictly into world.Seed: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("trailing data after the seed object: %v", err)
	}
	if !bytes.HasPrefix(seedJSON, []byte("{\n  \"")) {
		t.Error("demo.json should stay indented for readability")
	}
}

func TestSeedReturnsFreshCopies(t *testing.T) {
	a := mustSeed(t)
	a.Actors[0]["name"] = "changed"
	a.Title = "changed"
	b := mustSeed(t)
	if b.Title != "Demo Tavern" || b.Actors[0]["name"] == "changed" {
		t.Fatal("Seed returned shared state")
	}
}

func TestWorldInfo(t *testing.T) {
	s := mustSeed(t)
	if ClientID != "demo" {
		t.Errorf("ClientID = %q", ClientID)
	}
	if s.Title != "Demo Tavern" {
		t.Errorf("Title = %q", s.Title)
	}
	if s.System != "dnd5e" {
		t.Errorf("System = %q", s.System)
	}
	want := map[string]world.Role{
		world.PermissionFilesBrowse: world.RoleTrusted,
		world.PermissionFilesUpload: world.RoleTrusted,
		"ACTOR_CREATE":              world.RoleAssistant,
		"ITEM_CREATE":               world.RoleAssistant,
		"SCENE_CREATE":              world.RoleAssistant,
		"MACRO_CREATE":              world.RoleAssistant,
		"JOURNAL_CREATE":            world.RoleTrusted,
	}
	if !maps.Equal(s.Permissions, want) {
		t.Errorf("Permissions = %v, want %v", s.Permissions, want)
	}
}

// TestIDs checks every `_id` anywhere in the seed (documents, embedded
// documents, activities, active effects): 16 letters or digits, and unique
// across the whole world so that any id names one thing.
func TestIDs(t *testing.T) {
	var raw any
	if err := json.Unmarshal(seedJSON, &raw); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if id, ok := v["_id"]; ok {
				s, isStr := id.(string)
				switch {
				case !isStr:
					t.Errorf("%s._id = %#v, want a string", where, id)
				case !idPattern.MatchString(s):
					t.Errorf("%s._id = %q is not 16 letters or digits", where, s)
				case seen[s] != "":
					t.Errorf("_id %q used twice: %s and %s", s, seen[s], where)
				default:
					seen[s] = where
				}
			}
			if acts, ok := v["activities"].(map[string]any); ok {
				for k, a := range acts {
					if id, _ := at(a, "_id"); id != k {
						t.Errorf("%s.activities[%q] has _id %v", where, k, id)
					}
				}
			}
			for k, e := range v {
				walk(e, where+"."+k)
			}
		case []any:
			for i, e := range v {
				walk(e, where+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	walk(raw, "seed")

	// Ids the README and the manual rely on.
	s := mustSeed(t)
	for coll, want := range map[string][]string{
		"users":   {gmID, aliceID, bobID, tessID},
		"actors":  {ariaID, bromID, goblinID, guardID, maraID},
		"folders": {heroesFolderID, monstersFolderID, treasureFolderID},
		"scenes":  {sceneID},
		"journal": {journalID},
		"macros":  {macroID},
	} {
		docs := topLevel(s)[coll]
		for _, id := range want {
			byID(t, docs, id)
		}
	}
}

func TestUsers(t *testing.T) {
	s := mustSeed(t)
	want := []struct {
		id, name  string
		role      world.Role
		character any
	}{
		{gmID, "Gamemaster", world.RoleGamemaster, nil},
		{aliceID, "Alice", world.RolePlayer, ariaID},
		{bobID, "Bob", world.RolePlayer, bromID},
		{tessID, "Tess", world.RoleTrusted, nil},
	}
	if len(s.Users) != len(want) {
		t.Fatalf("%d users, want %d", len(s.Users), len(want))
	}
	for i, w := range want {
		u := s.Users[i]
		if u["_id"] != w.id || u["name"] != w.name || u["role"] != float64(w.role) {
			t.Errorf("user %d = {%v %v %v}, want {%s %s %d}", i, u["_id"], u["name"], u["role"], w.id, w.name, w.role)
		}
		if u["character"] != w.character {
			t.Errorf("user %s character = %v, want %v", w.name, u["character"], w.character)
		}
	}
}

func TestFoldersAndReferences(t *testing.T) {
	s := mustSeed(t)
	want := map[string][2]string{
		heroesFolderID:   {"Heroes", "Actor"},
		monstersFolderID: {"Monsters", "Actor"},
		treasureFolderID: {"Treasure", "Item"},
	}
	if len(s.Folders) != len(want) {
		t.Fatalf("%d folders, want %d", len(s.Folders), len(want))
	}
	folderType := map[string]string{}
	for _, f := range s.Folders {
		id := f["_id"].(string)
		w, ok := want[id]
		if !ok {
			t.Errorf("unexpected folder %s", id)
			continue
		}
		if f["name"] != w[0] || f["type"] != w[1] {
			t.Errorf("folder %s = {%v %v}, want %v", id, f["name"], f["type"], w)
		}
		if f["folder"] != nil {
			t.Errorf("folder %s is nested", id)
		}
		folderType[id] = w[1]
	}

	docType := map[string]string{"actors": "Actor", "items": "Item", "scenes": "Scene", "journal": "JournalEntry", "macros": "Macro"}
	for coll, dt := range docType {
		for _, d := range topLevel(s)[coll] {
			f, ok := d["folder"]
			if !ok {
				t.Errorf("%s %v has no folder field", coll, d["_id"])
				continue
			}
			if f == nil {
				continue
			}
			if folderType[f.(string)] != dt {
				t.Errorf("%s %v is in folder %v, which is not a %s folder", coll, d["_id"], f, dt)
			}
		}
	}

	wantFolder := map[string]any{ariaID: heroesFolderID, bromID: heroesFolderID, goblinID: monstersFolderID}
	for id, f := range wantFolder {
		if got := byID(t, s.Actors, id)["folder"]; got != f {
			t.Errorf("actor %s folder = %v, want %v", id, got, f)
		}
	}
	if got := byID(t, s.Items, "potionHealing001")["folder"]; got != treasureFolderID {
		t.Errorf("Potion of Healing folder = %v", got)
	}

	// Users' characters and tokens' actors exist.
	for _, u := range s.Users {
		if c, _ := u["character"].(string); c != "" {
			byID(t, s.Actors, c)
		}
	}
	for _, sc := range s.Scenes {
		for _, tok := range embedded(t, sc, "tokens") {
			byID(t, s.Actors, str(t, tok, "actorId"))
		}
	}
}

func TestOwnership(t *testing.T) {
	s := mustSeed(t)
	users := map[string]bool{}
	for _, u := range s.Users {
		users[u["_id"].(string)] = true
	}
	check := func(d world.Document, what string, minDefault float64) {
		t.Helper()
		o := ownership(t, d)
		def, ok := o["default"]
		if !ok {
			t.Errorf("%s %v: ownership has no default", what, d["_id"])
		}
		if def < minDefault || def > 3 {
			t.Errorf("%s %v: ownership.default = %v", what, d["_id"], def)
		}
		for k, v := range o {
			if k == "default" {
				continue
			}
			if !users[k] {
				t.Errorf("%s %v: ownership names unknown user %q", what, d["_id"], k)
			}
			if v < 0 || v > 3 {
				t.Errorf("%s %v: ownership.%s = %v", what, d["_id"], k, v)
			}
		}
	}
	for _, coll := range []string{"actors", "items", "scenes", "journal", "macros"} {
		for _, d := range topLevel(s)[coll] {
			check(d, coll, 0)
		}
	}
	for _, a := range s.Actors {
		for _, it := range embedded(t, a, "items") {
			check(it, "item of "+a["name"].(string), 0)
		}
	}
	for _, j := range s.JournalEntries {
		for _, p := range embedded(t, j, "pages") {
			check(p, "page", -1) // -1 = inherit from the entry
		}
	}

	want := map[string]map[string]float64{
		ariaID:             {"default": 0, gmID: 3, aliceID: 3, bobID: 1},
		bromID:             {"default": 0, gmID: 3, bobID: 3, aliceID: 2},
		goblinID:           {"default": 0, gmID: 3},
		guardID:            {"default": 1, gmID: 3},
		maraID:             {"default": 2, gmID: 3},
		"potionHealing001": {"default": 2, gmID: 3},
		journalID:          {"default": 2, gmID: 3},
		macroID:            {"default": 2, gmID: 3},
	}
	all := slices.Concat(s.Actors, s.Items, s.JournalEntries, s.Macros)
	for id, w := range want {
		if got := ownership(t, byID(t, all, id)); !maps.Equal(got, w) {
			t.Errorf("%s ownership = %v, want %v", id, got, w)
		}
	}
}

var itemTypes = []string{"weapon", "equipment", "consumable", "tool", "loot", "container", "feat", "spell", "class", "subclass", "background", "race"}

var recoveryPeriods = []string{"sr", "lr", "day", "dawn", "dusk", "initiative", "turnStart", "turnEnd", "turn"}

// TestItemShapes checks every item, world or embedded, against the dnd5e 4.x/5.x
// item source shape the relay reads.
func TestItemShapes(t *testing.T) {
	s := mustSeed(t)
	var all []world.Document
	all = append(all, s.Items...)
	for _, a := range s.Actors {
		all = append(all, embedded(t, a, "items")...)
	}
	for _, it := range all {
		name, _ := it["name"].(string)
		t.Run(name+"/"+it["_id"].(string), func(t *testing.T) {
			if keys := slices.Sorted(maps.Keys(it)); !slices.Equal(keys, itemKeys) {
				t.Errorf("keys = %v, want %v", keys, itemKeys)
			}
			typ := str(t, it, "type")
			if !slices.Contains(itemTypes, typ) {
				t.Errorf("type %q", typ)
			}
			if name == "" {
				t.Error("empty name")
			}
			if img := str(t, it, "img"); img == "" {
				t.Error("empty img")
			}
			if _, ok := it["system"].(map[string]any); !ok {
				t.Fatal("system is not an object")
			}
			list(t, it, "effects")
			wantStr(t, it, "system.source.license", "CC-BY-4.0")
			wantStr(t, it, "system.source.book", "SRD 5.1")

			if _, ok := at(it, "system.quantity"); ok {
				if q := num(t, it, "system.quantity"); q < 1 {
					t.Errorf("quantity %v", q)
				}
				num(t, it, "system.weight.value")
				wantStr(t, it, "system.weight.units", "lb")
				num(t, it, "system.price.value")
			}
			if _, ok := at(it, "system.equipped"); ok {
				boolean(t, it, "system.equipped")
				boolean(t, it, "system.attuned")
				if a := str(t, it, "system.attunement"); a != "" && a != "required" && a != "optional" {
					t.Errorf("attunement %q", a)
				}
			}
			if _, ok := at(it, "system.uses"); ok {
				checkUses(t, it)
			}
			if acts, ok := at(it, "system.activities"); ok {
				m, ok := acts.(map[string]any)
				if !ok {
					t.Fatalf("activities = %#v, want an object", acts)
				}
				for k := range m {
					str(t, m, k+".type")
					str(t, m, k+".activation.type")
				}
			}
		})
	}
}

func checkUses(t *testing.T, it world.Document) {
	t.Helper()
	maxStr := str(t, it, "system.uses.max")
	spent := num(t, it, "system.uses.spent")
	rec := list(t, it, "system.uses.recovery")
	if maxStr == "" {
		if spent != 0 || len(rec) != 0 {
			t.Errorf("uses without max: spent %v, recovery %v", spent, rec)
		}
		return
	}
	mx, err := strconv.Atoi(maxStr)
	if err != nil || mx < 1 {
		t.Errorf("uses.max = %q, want a positive whole number", maxStr)
	}
	if spent < 0 || spent > float64(mx) {
		t.Errorf("uses.spent = %v out of 0..%d", spent, mx)
	}
	for i := range rec {
		p := "system.uses.recovery." + strconv.Itoa(i)
		r := rec[i]
		if !slices.Contains(recoveryPeriods, str(t, r, "period")) {
			t.Errorf("%s.period = %q", p, str(t, r, "period"))
		}
		switch typ := str(t, r, "type"); typ {
		case "recoverAll", "loseAll":
		case "formula":
			if str(t, r, "formula") == "" {
				t.Errorf("%s: formula recovery without formula", p)
			}
		default:
			t.Errorf("%s.type = %q", p, typ)
		}
	}
}

func checkCharacterBasics(t *testing.T, a world.Document, saves []string, skillProf map[string]float64) {
	t.Helper()
	for _, k := range abilityKeys {
		v := num(t, a, "system.abilities."+k+".value")
		if v < 3 || v > 20 {
			t.Errorf("%s score %v", k, v)
		}
		want := 0.0
		if slices.Contains(saves, k) {
			want = 1
		}
		wantNum(t, a, "system.abilities."+k+".proficient", want)
	}
	sk, ok := get(t, a, "system.skills").(map[string]any)
	if !ok || len(sk) != len(skillAbilities) {
		t.Fatalf("skills = %v, want the %d dnd5e skills", sk, len(skillAbilities))
	}
	for k, abl := range skillAbilities {
		wantStr(t, a, "system.skills."+k+".ability", abl)
		wantNum(t, a, "system.skills."+k+".value", skillProf[k])
	}
	wantNum(t, a, "system.attributes.death.success", 0)
	wantNum(t, a, "system.attributes.death.failure", 0)
	cur, ok := get(t, a, "system.currency").(map[string]any)
	if !ok || len(cur) != 5 {
		t.Fatalf("currency = %v", cur)
	}
	for _, d := range []string{"pp", "gp", "ep", "sp", "cp"} {
		if num(t, a, "system.currency."+d) < 0 {
			t.Errorf("negative %s", d)
		}
	}
}

func checkResources(t *testing.T, a world.Document) {
	t.Helper()
	res, ok := get(t, a, "system.resources").(map[string]any)
	if !ok || len(res) != 3 {
		t.Fatalf("resources = %v", res)
	}
	for _, k := range []string{"primary", "secondary", "tertiary"} {
		r, ok := res[k].(map[string]any)
		if !ok {
			t.Fatalf("resources.%s missing", k)
		}
		if keys := slices.Sorted(maps.Keys(r)); !slices.Equal(keys, []string{"label", "lr", "max", "sr", "value"}) {
			t.Errorf("resources.%s keys = %v", k, keys)
		}
		num(t, r, "value")
		num(t, r, "max")
		boolean(t, r, "sr")
		boolean(t, r, "lr")
		str(t, r, "label")
	}
}

func TestAria(t *testing.T) {
	s := mustSeed(t)
	a := byID(t, s.Actors, ariaID)
	wantStr(t, a, "name", "Aria Vale")
	wantStr(t, a, "type", "character")
	wantStr(t, a, "img", "tokens/aria.svg")
	checkCharacterBasics(t, a, []string{"int", "wis"}, map[string]float64{"arc": 1, "his": 1, "ins": 1, "inv": 1})
	checkResources(t, a)
	if v := num(t, a, "system.abilities.int.value"); v < 16 {
		t.Errorf("Int %v, want 16+", v)
	}
	wantStr(t, a, "system.attributes.spellcasting", "int")
	hp, hpMax := num(t, a, "system.attributes.hp.value"), num(t, a, "system.attributes.hp.max")
	if hp <= 0 || hp >= hpMax {
		t.Errorf("hp %v/%v, want below max", hp, hpMax)
	}
	wantNum(t, a, "system.attributes.hp.max", 32)
	wantNum(t, a, "system.details.xp.value", 6500)
	if num(t, a, "system.currency.gp") <= 0 {
		t.Error("no gp")
	}
	for _, p := range []string{"primary.value", "primary.max"} {
		wantNum(t, a, "system.resources."+p, 1)
	}
	wantStr(t, a, "system.resources.primary.label", "Arcane Recovery")
	wantBool(t, a, "system.resources.primary.lr", true)
	wantBool(t, a, "system.resources.primary.sr", false)

	// Spell slots of a 5th-level full caster: 4/3/2, some spent.
	used := 0.0
	for lvl := 1; lvl <= 9; lvl++ {
		p := "system.spells.spell" + strconv.Itoa(lvl)
		want := map[int]float64{1: 4, 2: 3, 3: 2}[lvl]
		wantNum(t, a, p+".max", want)
		v := num(t, a, p+".value")
		if v < 0 || v > want {
			t.Errorf("%s.value = %v out of 0..%v", p, v, want)
		}
		used += want - v
	}
	if used == 0 {
		t.Error("no spell slot spent; rests would have nothing to restore")
	}
	wantNum(t, a, "system.spells.pact.max", 0)

	items := embedded(t, a, "items")
	cls := byName(t, items, "Wizard")
	wantStr(t, cls, "type", "class")
	wantNum(t, cls, "system.levels", 5)
	wantStr(t, cls, "system.hitDice", "d6")
	wantNum(t, cls, "system.hitDiceUsed", 1)
	wantStr(t, cls, "system.hd.denomination", "d6")
	wantNum(t, cls, "system.hd.spent", 1)
	wantStr(t, cls, "system.spellcasting.progression", "full")
	wantStr(t, cls, "system.spellcasting.ability", "int")
	wantStr(t, a, "system.details.originalClass", str(t, cls, "_id"))
	if lv := classLevels(t, items); lv != 5 {
		t.Errorf("character level %v", lv)
	}

	wantSpells := []struct {
		name, id, school string
		level            float64
		props            []string
		prepared         float64
		activity         string
	}{
		{"Fire Bolt", "fireBolt00000001", "evo", 0, []string{"vocal", "somatic"}, 1, "attack"},
		{"Mage Hand", "mageHand00000001", "con", 0, []string{"vocal", "somatic"}, 1, "utility"},
		{"Light", "light00000000001", "evo", 0, []string{"vocal", "material"}, 1, "utility"},
		{"Magic Missile", "magicMissile0001", "evo", 1, []string{"vocal", "somatic"}, 1, "damage"},
		{"Shield", "shieldSpell00001", "abj", 1, []string{"vocal", "somatic"}, 1, "utility"},
		{"Detect Magic", "detectMagic00001", "div", 1, []string{"vocal", "somatic", "ritual", "concentration"}, 0, "utility"},
		{"Mage Armor", "mageArmor0000001", "abj", 1, []string{"vocal", "somatic", "material"}, 1, "utility"},
		{"Misty Step", "mistyStep0000001", "con", 2, []string{"vocal"}, 1, "utility"},
		{"Hold Person", "holdPerson000001", "enc", 2, []string{"vocal", "somatic", "material", "concentration"}, 1, "save"},
		{"Fireball", "fireball00000001", "evo", 3, []string{"vocal", "somatic", "material"}, 1, "save"},
		{"Fly", "flySpell00000001", "trs", 3, []string{"vocal", "somatic", "material", "concentration"}, 1, "utility"},
	}
	var spellCount int
	for _, it := range items {
		if it["type"] == "spell" {
			spellCount++
		}
	}
	if spellCount != len(wantSpells) {
		t.Errorf("%d spells, want %d", spellCount, len(wantSpells))
	}
	for _, w := range wantSpells {
		sp := byName(t, items, w.name)
		if sp["_id"] != w.id || sp["type"] != "spell" {
			t.Errorf("%s: _id %v type %v", w.name, sp["_id"], sp["type"])
		}
		wantNum(t, sp, "system.level", w.level)
		wantStr(t, sp, "system.school", w.school)
		if got := strs(t, sp, "system.properties"); !slices.Equal(got, w.props) {
			t.Errorf("%s properties = %v, want %v", w.name, got, w.props)
		}
		wantStr(t, sp, "system.method", "spell")
		wantNum(t, sp, "system.prepared", w.prepared)
		wantStr(t, sp, "system.preparation.mode", "prepared")
		wantBool(t, sp, "system.preparation.prepared", w.prepared > 0)
		str(t, sp, "system.activation.type")
		str(t, sp, "system.duration.units")
		str(t, sp, "system.range.units")
		if strings.Contains(strings.Join(w.props, ","), "material") && str(t, sp, "system.materials.value") == "" {
			t.Errorf("%s: material component not described", w.name)
		}
		acts := get(t, sp, "system.activities").(map[string]any)
		if len(acts) != 1 {
			t.Errorf("%s: %d activities, want 1", w.name, len(acts))
		}
		for _, act := range acts {
			wantStr(t, act, "type", w.activity)
		}
	}
	wantStr(t, byName(t, items, "Shield"), "system.activation.type", "reaction")
	wantStr(t, byName(t, items, "Misty Step"), "system.activation.type", "bonus")
	for _, act := range get(t, byName(t, items, "Fireball"), "system.activities").(map[string]any) {
		if got := strs(t, act, "save.ability"); !slices.Equal(got, []string{"dex"}) {
			t.Errorf("Fireball save = %v", got)
		}
		wantStr(t, act, "damage.onSave", "half")
		wantNum(t, act, "damage.parts.0.number", 8)
		wantNum(t, act, "damage.parts.0.denomination", 6)
	}
	for _, act := range get(t, byName(t, items, "Hold Person"), "system.activities").(map[string]any) {
		if got := strs(t, act, "save.ability"); !slices.Equal(got, []string{"wis"}) {
			t.Errorf("Hold Person save = %v", got)
		}
	}

	wand := byName(t, items, "Wand of Magic Missiles")
	wantStr(t, wand, "_id", "wandMagicMissile")
	wantStr(t, wand, "type", "consumable")
	wantStr(t, wand, "system.type.value", "wand")
	wantStr(t, wand, "system.uses.max", "7")
	if sp := num(t, wand, "system.uses.spent"); sp < 1 || sp >= 7 {
		t.Errorf("wand spent %v, want some but not all charges", sp)
	}
	rec := list(t, wand, "system.uses.recovery")
	if len(rec) != 1 {
		t.Fatalf("wand recovery = %v", rec)
	}
	wantStr(t, rec[0], "period", "dawn")
	wantStr(t, rec[0], "type", "formula")
	wantStr(t, rec[0], "formula", "1d6 + 1")
	wantStr(t, wand, "system.attunement", "")

	ring := byName(t, items, "Ring of Protection")
	wantStr(t, ring, "_id", "ringProtection01")
	wantStr(t, ring, "type", "equipment")
	wantStr(t, ring, "system.attunement", "required")
	wantBool(t, ring, "system.attuned", false)
	wantBool(t, ring, "system.equipped", false)
}

func classLevels(t *testing.T, items []world.Document) float64 {
	t.Helper()
	var n float64
	for _, it := range items {
		if it["type"] == "class" {
			n += num(t, it, "system.levels")
		}
	}
	return n
}

func TestBrom(t *testing.T) {
	s := mustSeed(t)
	b := byID(t, s.Actors, bromID)
	wantStr(t, b, "name", "Brom Ironfist")
	wantStr(t, b, "type", "character")
	wantStr(t, b, "img", "tokens/brom.svg")
	checkCharacterBasics(t, b, []string{"str", "con"}, map[string]float64{"ath": 1, "itm": 1, "prc": 1, "sur": 1})
	checkResources(t, b)
	hp, hpMax := num(t, b, "system.attributes.hp.value"), num(t, b, "system.attributes.hp.max")
	if hp <= 0 || hp >= hpMax {
		t.Errorf("hp %v/%v, want below max", hp, hpMax)
	}
	wantNum(t, b, "system.attributes.hp.max", 49)
	wantNum(t, b, "system.details.xp.value", 6500)
	if num(t, b, "system.currency.gp") <= 0 {
		t.Error("no gp")
	}
	for lvl := 1; lvl <= 9; lvl++ {
		wantNum(t, b, "system.spells.spell"+strconv.Itoa(lvl)+".max", 0)
	}

	items := embedded(t, b, "items")
	cls := byName(t, items, "Fighter")
	wantStr(t, cls, "type", "class")
	wantNum(t, cls, "system.levels", 5)
	wantStr(t, cls, "system.hitDice", "d10")
	wantNum(t, cls, "system.hitDiceUsed", 2)
	wantStr(t, cls, "system.hd.denomination", "d10")
	wantNum(t, cls, "system.hd.spent", 2)
	wantStr(t, cls, "system.spellcasting.progression", "none")
	if lv := classLevels(t, items); lv != 5 {
		t.Errorf("character level %v", lv)
	}

	for _, name := range []string{"Second Wind", "Action Surge"} {
		f := byName(t, items, name)
		wantStr(t, f, "type", "feat")
		wantStr(t, f, "system.uses.max", "1")
		rec := list(t, f, "system.uses.recovery")
		if len(rec) != 1 {
			t.Fatalf("%s recovery = %v", name, rec)
		}
		wantStr(t, rec[0], "period", "sr")
		wantStr(t, rec[0], "type", "recoverAll")
	}
	wantNum(t, byName(t, items, "Action Surge"), "system.uses.spent", 1)
	wantNum(t, byName(t, items, "Second Wind"), "system.uses.spent", 0)
	for _, name := range []string{"Fighting Style (Defense)", "Extra Attack"} {
		wantStr(t, byName(t, items, name), "type", "feat")
	}

	chain := byName(t, items, "Chain Mail")
	wantStr(t, chain, "type", "equipment")
	wantStr(t, chain, "system.type.value", "heavy")
	wantNum(t, chain, "system.armor.value", 16)
	wantBool(t, chain, "system.equipped", true)
	shield := byName(t, items, "Shield")
	wantStr(t, shield, "type", "equipment")
	wantStr(t, shield, "system.type.value", "shield")
	wantNum(t, shield, "system.armor.value", 2)
	wantBool(t, shield, "system.equipped", true)

	for _, w := range []struct {
		name  string
		denom float64
		dtype string
		props []string
	}{
		{"Longsword", 8, "slashing", []string{"ver"}},
		{"Handaxe", 6, "slashing", []string{"lgt", "thr"}},
	} {
		wpn := byName(t, items, w.name)
		wantStr(t, wpn, "type", "weapon")
		wantBool(t, wpn, "system.equipped", true)
		wantNum(t, wpn, "system.damage.base.number", 1)
		wantNum(t, wpn, "system.damage.base.denomination", w.denom)
		if got := strs(t, wpn, "system.damage.base.types"); !slices.Equal(got, []string{w.dtype}) {
			t.Errorf("%s damage types %v", w.name, got)
		}
		if got := strs(t, wpn, "system.properties"); !slices.Equal(got, w.props) {
			t.Errorf("%s properties %v, want %v", w.name, got, w.props)
		}
		for _, act := range get(t, wpn, "system.activities").(map[string]any) {
			wantStr(t, act, "type", "attack")
		}
	}
	wantNum(t, byName(t, items, "Longsword"), "system.damage.versatile.denomination", 10)
	wantNum(t, byName(t, items, "Handaxe"), "system.range.value", 20)
	wantNum(t, byName(t, items, "Handaxe"), "system.range.long", 60)
}

func TestNPCs(t *testing.T) {
	s := mustSeed(t)
	for _, w := range []struct {
		id, name string
		ac, hp   float64
		cr       float64
		items    []string
	}{
		{goblinID, "Goblin", 15, 7, 0.25, []string{"Scimitar", "Shortbow", "Nimble Escape"}},
		{guardID, "Town Guard", 16, 11, 0.125, []string{"Spear"}},
		{maraID, "Innkeeper Mara", 10, 4, 0, []string{"Club"}},
	} {
		a := byID(t, s.Actors, w.id)
		wantStr(t, a, "name", w.name)
		wantStr(t, a, "type", "npc")
		wantStr(t, a, "system.attributes.ac.calc", "flat")
		wantNum(t, a, "system.attributes.ac.flat", w.ac)
		wantNum(t, a, "system.attributes.hp.value", w.hp)
		wantNum(t, a, "system.attributes.hp.max", w.hp)
		wantNum(t, a, "system.details.cr", w.cr)
		for k, abl := range skillAbilities {
			wantStr(t, a, "system.skills."+k+".ability", abl)
		}
		items := embedded(t, a, "items")
		for _, n := range w.items {
			byName(t, items, n)
		}
	}
	g := byID(t, s.Actors, goblinID)
	for _, k := range abilityKeys {
		want := map[string]float64{"str": 8, "dex": 14, "con": 10, "int": 10, "wis": 8, "cha": 8}[k]
		wantNum(t, g, "system.abilities."+k+".value", want)
	}
	wantNum(t, g, "system.skills.ste.value", 2) // Stealth +6 at proficiency +2
	wantStr(t, g, "system.attributes.hp.formula", "2d6")
	gi := embedded(t, g, "items")
	wantStr(t, byName(t, gi, "Nimble Escape"), "type", "feat")
	wantNum(t, byName(t, gi, "Scimitar"), "system.damage.base.denomination", 6)
	wantNum(t, byName(t, gi, "Shortbow"), "system.range.value", 80)
	wantNum(t, byName(t, gi, "Shortbow"), "system.range.long", 320)
	spear := byName(t, embedded(t, byID(t, s.Actors, guardID), "items"), "Spear")
	wantNum(t, spear, "system.damage.base.denomination", 6)
	wantNum(t, spear, "system.damage.versatile.denomination", 8)
}

func TestWorldItems(t *testing.T) {
	s := mustSeed(t)
	potion := byName(t, s.Items, "Potion of Healing")
	wantStr(t, potion, "_id", "potionHealing001")
	wantStr(t, potion, "type", "consumable")
	wantStr(t, potion, "system.type.value", "potion")
	for _, n := range []string{"Potion of Healing", "Rope, hempen (50 feet)", "Torch"} {
		it := byName(t, s.Items, n)
		if q := num(t, it, "system.quantity"); q < 1 {
			t.Errorf("%s quantity %v", n, q)
		}
	}
}

func TestScene(t *testing.T) {
	s := mustSeed(t)
	if len(s.Scenes) != 1 {
		t.Fatalf("%d scenes", len(s.Scenes))
	}
	sc := s.Scenes[0]
	wantStr(t, sc, "_id", sceneID)
	wantStr(t, sc, "name", "Tavern")
	wantBool(t, sc, "active", true)
	wantStr(t, sc, "background.src", "maps/tavern.svg")
	size := num(t, sc, "grid.size")
	w, h := num(t, sc, "width"), num(t, sc, "height")
	if size <= 0 || w <= 0 || h <= 0 {
		t.Errorf("grid %v, size %vx%v", size, w, h)
	}
	toks := embedded(t, sc, "tokens")
	wantTok := map[string]struct {
		id          string
		disposition float64
	}{
		ariaID:   {"ariaToken0000001", 1},
		bromID:   {"bromToken0000001", 1},
		goblinID: {"goblinToken00001", -1},
	}
	if len(toks) != len(wantTok) {
		t.Errorf("%d tokens, want %d", len(toks), len(wantTok))
	}
	for _, tok := range toks {
		wt, ok := wantTok[str(t, tok, "actorId")]
		if !ok {
			t.Errorf("unexpected token for %v", tok["actorId"])
			continue
		}
		wantStr(t, tok, "_id", wt.id)
		wantNum(t, tok, "disposition", wt.disposition)
		wantBool(t, tok, "hidden", false)
		str(t, tok, "name")
		x, y := num(t, tok, "x"), num(t, tok, "y")
		if x < 0 || y < 0 || x >= w || y >= h {
			t.Errorf("token %s at (%v,%v) outside the scene", wt.id, x, y)
		}
	}
}

func TestJournalAndMacro(t *testing.T) {
	s := mustSeed(t)
	if len(s.JournalEntries) != 1 {
		t.Fatalf("%d journal entries", len(s.JournalEntries))
	}
	j := s.JournalEntries[0]
	wantStr(t, j, "_id", journalID)
	wantStr(t, j, "name", "Welcome to the Tavern")
	pages := embedded(t, j, "pages")
	if len(pages) != 1 {
		t.Fatalf("%d pages", len(pages))
	}
	wantStr(t, pages[0], "_id", pageID)
	wantStr(t, pages[0], "type", "text")
	if str(t, pages[0], "text.content") == "" {
		t.Error("empty page")
	}

	if len(s.Macros) != 1 {
		t.Fatalf("%d macros", len(s.Macros))
	}
	m := s.Macros[0]
	wantStr(t, m, "_id", macroID)
	wantStr(t, m, "name", "Roll Initiative")
	wantStr(t, m, "type", "script")
	if c := str(t, m, "command"); c == "" || len(c) > 500 {
		t.Errorf("command length %d", len(c))
	}
	if len(s.Combats) != 0 {
		t.Errorf("%d combats", len(s.Combats))
	}
}

// localPath reports whether an image path points into the world's file area
// rather than at the tabletop's or the system's bundled icons.
func localPath(p string) bool {
	return p != "" && !strings.HasPrefix(p, "icons/") && !strings.HasPrefix(p, "systems/")
}

func TestFiles(t *testing.T) {
	fsys := Files()
	for _, p := range []string{"handouts/welcome.md", "maps/tavern.svg", "tokens/aria.svg", "tokens/brom.svg", "notes/prices.json"} {
		if _, err := fs.Stat(fsys, p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	var n int
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if len(data) > 8<<10 {
			t.Errorf("%s is %d bytes; keep demo files small", p, len(data))
		}
		if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
			t.Errorf("%s is not text", p)
		}
		switch {
		case strings.HasSuffix(p, ".json"):
			if !json.Valid(data) {
				t.Errorf("%s is not valid JSON", p)
			}
		case strings.HasSuffix(p, ".svg"):
			dec := xml.NewDecoder(bytes.NewReader(data))
			for {
				if _, err := dec.Token(); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Errorf("%s is not well-formed XML: %v", p, err)
					}
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("empty file area")
	}

	// Every local path the seed refers to exists.
	s := mustSeed(t)
	var refs []string
	for _, a := range s.Actors {
		refs = append(refs, str(t, a, "img"), str(t, a, "prototypeToken.texture.src"))
		for _, it := range embedded(t, a, "items") {
			refs = append(refs, str(t, it, "img"))
		}
	}
	for _, it := range s.Items {
		refs = append(refs, str(t, it, "img"))
	}
	for _, sc := range s.Scenes {
		refs = append(refs, str(t, sc, "background.src"))
		for _, tok := range embedded(t, sc, "tokens") {
			refs = append(refs, str(t, tok, "texture.src"))
		}
	}
	for _, u := range s.Users {
		refs = append(refs, str(t, u, "avatar"))
	}
	for _, r := range refs {
		if !localPath(r) {
			continue
		}
		if _, err := fs.Stat(fsys, r); err != nil {
			t.Errorf("seed refers to %q, which is not in the file area: %v", r, err)
		}
	}
}
