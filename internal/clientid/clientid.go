// Package clientid checks the form of a world's client id, which every
// call that names a world carries and which is also the name of the
// world's directory. The check ran as a regular expression on every call;
// a loop over the bytes accepts exactly the same ids at a small fraction
// of the instructions.
package clientid

// MaxLen is the longest client id, in bytes.
const MaxLen = 64

// Valid reports whether id has the form of a client id: one to MaxLen
// ASCII letters, digits, underscores and hyphens, starting with a letter
// or a digit (the regular expression ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$).
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLen || id[0] == '_' || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}
