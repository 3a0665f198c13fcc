package node

import (
	"context"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server/keys"
)

// suspensionSweepEvery is how often the node closes the sockets of linked
// worlds whose account has been suspended, here or on another node: a
// suspension reaches them within this time and a second at most.
const suspensionSweepEvery = 400 * time.Millisecond

// refuseSuspended is the link service's Refuse: a linked world whose
// account is suspended may not connect until the account is resumed.
func (r *Node) refuseSuspended(ctx context.Context, clientID string) error {
	owner, err := worldOwners{r.links.Pairings(), r.keys}.Owner(ctx, clientID)
	if err != nil {
		return err
	}
	return r.keys.Suspension(owner)
}

// sweepSuspended closes, until ctx ends, the connections of the linked
// worlds whose account is suspended. The worlds of the operator's
// account, which is never suspended, cost nothing.
func sweepSuspended(ctx context.Context, accounts keys.Accounts, pairings *link.Pairings, hub *link.Hub) {
	t := time.NewTicker(suspensionSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		conns := hub.Connected()
		if len(conns) == 0 {
			continue
		}
		recs, err := pairings.Worlds(ctx)
		if err != nil {
			continue
		}
		owner := make(map[string]string, len(recs))
		for _, w := range recs {
			if w.Account != "" {
				owner[w.ClientID] = w.Account
			}
		}
		for _, c := range conns {
			if acct, ok := owner[c.ClientID]; ok && accounts.Suspension(acct) != nil {
				hub.Disconnect(c.ClientID, link.CloseShutdown, "Account suspended")
			}
		}
	}
}

// releaseAccount lets go of the worlds of an account that is being
// deleted: its embedded worlds are removed, and its linked worlds
// unpaired (their tokens revoked and their sockets closed).
func (r *Node) releaseAccount(ctx context.Context, accountID string) error {
	if err := r.releaseEmbedded(ctx, accountID); err != nil {
		return err
	}
	recs, err := r.links.Pairings().Worlds(ctx)
	if err != nil {
		return err
	}
	for _, w := range recs {
		if w.Account == accountID && w.Paired() {
			if _, _, err := r.links.Unpair(ctx, w.ClientID); err != nil {
				return err
			}
		}
	}
	return nil
}
