package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/world"
)

// TestToStatusLogsCauses: a world error's cause (a path, an SQLite error)
// goes to the log; the caller's status holds the message alone.
func TestToStatusLogsCauses(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cause := errors.New("open /srv/relay/data/worlds/demo/world.db: disk I/O error (10)")
	err := toStatus(context.Background(), log, world.Wrapf(world.ErrUnavailable, cause, "World demo could not be opened"))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "World demo could not be opened" {
		t.Fatalf("status %v", err)
	}
	if !strings.Contains(logged.String(), "/srv/relay/data/worlds/demo/world.db") {
		t.Fatalf("the cause is not logged: %s", logged.String())
	}
	// Anything that is not a world or key error is internal, logged whole.
	logged.Reset()
	err = toStatus(context.Background(), log, errors.New("sql: no rows in result set at /srv/relay"))
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "Internal error" || !strings.Contains(logged.String(), "/srv/relay") {
		t.Fatalf("status %v, log %s", err, logged.String())
	}
}
