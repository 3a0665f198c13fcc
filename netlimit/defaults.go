package netlimit

// Bounds of [DefaultMaxConns].
const (
	// fallbackMaxConns is the cap when the open-file limit is unknown.
	fallbackMaxConns = 10000
	// maxDefaultMaxConns bounds the default cap when the open-file limit
	// is huge or unlimited; a larger cap is a deliberate --max-conns.
	maxDefaultMaxConns = 1 << 20
	// minDefaultMaxConns is the least default cap, whatever the limit.
	minDefaultMaxConns = 64
)

// DefaultMaxConns returns the default cap on the connections open at once:
// three quarters of the process's open-file limit, which leaves the last
// quarter to the relay's own files (world databases, uploads and
// downloads in progress, logs), so that a full house of connections never
// keeps the relay from opening them.
func DefaultMaxConns() int {
	return defaultMaxConns(openFileLimit())
}

func defaultMaxConns(limit uint64) int {
	if limit == 0 {
		return fallbackMaxConns
	}
	n := limit / 4 * 3
	return int(max(min(n, maxDefaultMaxConns), minDefaultMaxConns))
}
