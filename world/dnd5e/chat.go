package dnd5e

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// author returns the user id chat messages are written as: the caller's,
// or for GM-level access the world's first gamemaster's.
func author(ctx context.Context, e *world.Engine, user *world.User) string {
	if user != nil {
		return user.ID
	}
	users, err := e.Users(ctx)
	if err != nil {
		return ""
	}
	best := ""
	for _, u := range users {
		if u.Role == world.RoleGamemaster && (best == "" || u.ID < best) {
			best = u.ID
		}
	}
	return best
}

// rollJSON is how a chat message stores a roll: the tabletop keeps each
// roll as a JSON string in the message's `rolls`.
type rollJSON struct {
	Class     string      `json:"class"`
	Formula   string      `json:"formula"`
	Result    string      `json:"result"`
	Total     float64     `json:"total"`
	Evaluated bool        `json:"evaluated"`
	Dice      []dice.Die  `json:"dice"`
	Options   rollOptions `json:"options"`
}

// rollOptions are the options stored with a roll.
type rollOptions struct {
	Flavor string `json:"flavor,omitempty"`
	Type   string `json:"type,omitempty"`
}

// message is a chat message to post.
type message struct {
	author  string
	actor   *actor
	flavor  string
	content string
	class   string // the roll class: D20Roll, DamageRoll, BasicRoll
	rolls   []dice.Result
	types   []string       // a damage type per roll, when known
	flags   map[string]any // flags.dnd5e
}

// post creates the chat message in the transaction. A message about an
// actor shows the actor's rolls and name, so it reaches only those who may
// read the actor in full: when some user may not, it is whispered to those
// who may and to the GMs (see audience), through every door that shows
// chat messages.
func post(tx *world.Tx, m message) error {
	rolls := make([]any, 0, len(m.rolls))
	for i, r := range m.rolls {
		rj := rollJSON{Class: m.class, Formula: r.Formula, Result: r.Result, Total: r.Total, Evaluated: true, Dice: r.Dice, Options: rollOptions{Flavor: m.flavor}}
		if i < len(m.types) {
			rj.Options.Type = m.types[i]
		}
		raw, err := json.Marshal(rj)
		if err != nil {
			return err
		}
		rolls = append(rolls, string(raw))
	}
	content := m.content
	if content == "" && len(m.rolls) > 0 {
		totals := make([]string, len(m.rolls))
		for i, r := range m.rolls {
			totals[i] = formatTotal(r.Total)
		}
		content = strings.Join(totals, ", ")
	}
	doc := world.Document{
		"author":    m.author,
		"speaker":   map[string]any{"scene": nil, "actor": str(m.actor.doc["_id"]), "token": nil, "alias": m.actor.name()},
		"flavor":    m.flavor,
		"content":   content,
		"rolls":     rolls,
		"whisper":   audience(tx.View(), m.actor.uuid),
		"blind":     false,
		"timestamp": float64(tx.Now().UnixMilli()),
		"flags":     map[string]any{"dnd5e": m.flags},
	}
	if len(rolls) > 0 {
		doc["sound"] = "sounds/dice.wav"
	}
	_, err := tx.Create("ChatMessage", "", doc)
	return err
}

// audience is the `whisper` of a message about an actor: empty (public)
// when every user may read the actor in full (OBSERVER), else the ids of
// the users who may, GMs included, sorted. The author always may: every
// operation that posts needs OBSERVER or OWNER on the actor.
func audience(v *world.View, actorUUID string) []any {
	var readers []string
	everyone := true
	v.Each("User", func(doc world.Document) bool {
		role, _ := doc["role"].(float64)
		u := &world.User{ID: str(doc["_id"]), Name: str(doc["name"]), Role: world.Role(role)}
		if level, err := v.ReadLevel(u, actorUUID); err == nil && level >= world.LevelObserver {
			readers = append(readers, u.ID)
		} else {
			everyone = false
		}
		return true
	})
	out := []any{}
	if everyone {
		return out
	}
	if len(readers) == 0 {
		// An empty whisper would be public: with no reader at all (a
		// world without GM users, written to with GM-level access), the
		// message is whispered to no one, which GMs still read.
		readers = []string{""}
	}
	slices.Sort(readers)
	for _, id := range readers {
		out = append(out, id)
	}
	return out
}

// formatTotal prints a roll total.
func formatTotal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
