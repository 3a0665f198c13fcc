package dnd5e

// The parameter rules of the operations, exported so that a world served
// elsewhere (a linked tabletop, whose module checks less) refuses the same
// inputs with the same texts before anything is sent to it.

// CheckSkill validates a skill abbreviation: `skill is required`, or
// `Invalid skill '<s>'. Valid skills: acr, ani, ...`.
func CheckSkill(skill string) error { return checkSkill(skill) }

// CheckAbility validates an ability abbreviation: `ability is required`,
// or `Invalid ability '<a>'. Valid abilities: str, dex, ...`.
func CheckAbility(ability string) error { return checkAbility(ability) }

// CheckBonus validates an extra bonus formula (empty is none): a formula
// the dice engine cannot read is an error naming `bonus`.
func CheckBonus(bonus string) error { return checkBonus(bonus) }
