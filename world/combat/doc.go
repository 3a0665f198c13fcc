// Package combat manages encounters: `Combat` documents with their embedded
// `combatants`, kept by the world engine like any other document. It works
// on the engine itself; package world/embedded applies it to the relay's
// own worlds as their [world.Encounters], and its types are the world's.
//
// Every operation runs in one world transaction ([world.Engine.Mutate]), so
// an encounter changes completely or not at all, and every change reaches
// the world's commit hook as document changes (combat created, updated with
// its turn or round, combatants added or removed, combat deleted) for the
// event streams.
//
// A combat document records, beside its combatants, its `round` (1 once
// started), its `turn` (an index into the initiative order below), whether
// it is the world's `active` encounter and whether it has `started`. A
// combatant records its `actorId`, `tokenId`, `sceneId`, `name`, `img`,
// `initiative` (null until rolled), `hidden` and `defeated`.
//
// Initiative order: highest initiative first (not yet rolled last), ties
// broken by the higher dexterity score, then by name, then by id so that
// the order never depends on chance. Turn navigation skips defeated
// combatants; moving past the last combatant starts the next round.
package combat
