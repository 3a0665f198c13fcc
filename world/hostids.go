package world

import (
	"context"
	"os"
	"path/filepath"
	"slices"

	"github.com/tabletop-relay/relay/internal/clientid"
)

// IDs returns the client ids of the host's worlds, sorted. Calls that name
// no world ask for it on every request (a relay with one world needs no
// clientId), so the list is read from the directory once and then kept
// until the host creates a world: the running host is the only writer of
// its directory. The slice is shared and must not be changed.
func (h *Host) IDs(ctx context.Context) ([]string, error) {
	if ids := h.ids.Load(); ids != nil {
		return *ids, nil
	}
	// The lock orders this read of the directory with forgetIDs: a world
	// moved into place during the read is forgotten after it, never before.
	h.idsMu.Lock()
	defer h.idsMu.Unlock()
	ids, err := h.scanIDs()
	if err != nil {
		return nil, err
	}
	h.ids.Store(&ids)
	return ids, nil
}

// scanIDs reads the client ids of the worlds from the directory, sorted:
// the directories named like a client id that hold a world database.
func (h *Host) scanIDs() ([]string, error) {
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		return nil, Wrapf(ErrUnavailable, err, "Could not read the worlds directory")
	}
	var ids []string
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || !clientid.Valid(id) {
			continue
		}
		if _, err := os.Stat(filepath.Join(h.dir, id, dbFile)); err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// forgetIDs drops the cached client ids once the directory has changed.
func (h *Host) forgetIDs() {
	h.idsMu.Lock()
	h.ids.Store(nil)
	h.idsMu.Unlock()
}
