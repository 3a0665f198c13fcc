package world

import (
	"context"
	"errors"
	"testing"
)

// TestUpdateJSON checks that UpdateJSON answers the JSON of exactly the
// version it committed, the same bytes as Update's result serialised and as
// GetJSON right after, for top-level and embedded documents, and that it
// refuses what Update refuses.
func TestUpdateJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	for i, uuid := range []string{actorOwner, swordUUID, actorOwner} {
		raw, err := tw.UpdateJSON(ctx, nil, uuid, Document{"name": "Renamed " + string(rune('A'+i))})
		if err != nil {
			t.Fatalf("UpdateJSON(%s): %v", uuid, err)
		}
		want, err := EncodeJSON(mustGet(t, tw, uuid))
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(want) {
			t.Errorf("UpdateJSON(%s) =\n%s\nwant what Get gives now:\n%s", uuid, raw, want)
		}
		got, err := tw.GetJSON(ctx, nil, uuid)
		if err != nil || string(got) != string(raw) {
			t.Errorf("GetJSON(%s) after UpdateJSON differs: %v\n%s", uuid, err, got)
		}
	}
	player := tw.user(t, "Bob")
	if _, err := tw.UpdateJSON(ctx, player, actorOwner, Document{"name": "Nope"}); !errors.Is(err, ErrPermission) {
		t.Errorf("a player who does not own the actor updated it: %v", err)
	}
	if _, err := tw.UpdateJSON(ctx, nil, "", Document{"name": "x"}); err == nil {
		t.Error("an empty uuid was accepted")
	}
}
