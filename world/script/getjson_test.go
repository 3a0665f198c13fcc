package script_test

import (
	"context"
	"encoding/json"

	"github.com/tabletop-relay/relay/world"
)

// GetJSON completes the fake's world.World; scripts read documents through
// Get, so this only serialises what Get returns.
func (f *fakeWorld) GetJSON(ctx context.Context, user *world.User, uuid string) ([]byte, error) {
	doc, err := f.Get(ctx, user, uuid)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// UpdateJSON completes the fake's world.World the same way, over Update.
func (f *fakeWorld) UpdateJSON(ctx context.Context, user *world.User, uuid string, data world.Document) ([]byte, error) {
	doc, err := f.Update(ctx, user, uuid, data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}
