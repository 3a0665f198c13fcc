// Package demo holds the demo world "Demo Tavern": a small fifth-edition
// (dnd5e) world used by the quick start and the manual's examples, the
// tests and new installations.
//
// The seed (demo.json) is in the tabletop's source-data shape; see
// [world.Seed]. Its document ids are fixed, readable and 16 characters long
// (for example the user "aliceUser0000001" and her character
// "ariaVale00000001"), so examples can name them.
//
// The world's file area ([Files]) holds the map, token images and handouts
// the seed refers to by relative path (for example "maps/tavern.svg").
//
// All game content comes from the System Reference Document 5.1 ("SRD 5.1")
// by Wizards of the Coast LLC, available at
// https://dnd.wizards.com/resources/systems-reference-document and licensed
// under the Creative Commons Attribution 4.0 International License
// (https://creativecommons.org/licenses/by/4.0/legalcode).
package demo

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"

	"github.com/tabletop-relay/relay/world"
)

// ClientID is the client id under which the demo world is served.
const ClientID = "demo"

//go:embed demo.json
var seedJSON []byte

//go:embed files
var files embed.FS

// Seed returns the demo world's seed. Every call decodes a fresh copy, so the
// caller may change the result freely.
func Seed() (world.Seed, error) {
	var s world.Seed
	dec := json.NewDecoder(bytes.NewReader(seedJSON))
	if err := dec.Decode(&s); err != nil {
		return world.Seed{}, fmt.Errorf("demo: decode seed: %w", err)
	}
	return s, nil
}

// Files returns the demo world's file area, rooted so that the paths used in
// the seed ("maps/tavern.svg", "tokens/aria.svg", "handouts/welcome.md", ...)
// open directly.
func Files() fs.FS {
	sub, err := fs.Sub(files, "files")
	if err != nil {
		// fs.Sub only fails for an invalid directory name.
		panic(err)
	}
	return sub
}
