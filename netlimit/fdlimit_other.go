//go:build !unix

package netlimit

// openFileLimit returns 0: the limit on open files is unknown here.
func openFileLimit() uint64 { return 0 }
