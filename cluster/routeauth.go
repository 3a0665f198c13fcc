package cluster

import (
	"crypto/subtle"
	"log/slog"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/server"
)

// RouteFailuresPerMinute is how many wrong route passwords one address (an
// IPv6 host by its /64) may present a minute on the route port; past it
// the address's routes are refused without their password being looked
// at, until its allowance comes back. A peer that knows the secret never
// fails, so it never meets the limit.
const RouteFailuresPerMinute = 10

// routeAuth checks the user and password of each route that connects to
// the embedded NATS server, as the server itself would, and limits the
// wrong ones per address: the server has no such limit of its own, but
// lets the relay take over the check (Options.CustomRouterAuthentication).
type routeAuth struct {
	user, password string
	failures       *server.RateLimiter
	log            *slog.Logger
}

func newRouteAuth(user, password string, log *slog.Logger) *routeAuth {
	return &routeAuth{user: user, password: password, failures: server.NewRateLimiter(RouteFailuresPerMinute, 0, nil), log: log}
}

// Check reports whether a route may join: its address has failures left
// and it presents the cluster's user and secret.
func (a *routeAuth) Check(c natsserver.ClientAuthentication) bool {
	addr := "unknown"
	if ra := c.RemoteAddress(); ra != nil {
		addr = netlimit.AddressKey(ra.String())
	}
	if blocked, _ := a.failures.Blocked(addr); blocked {
		a.log.Warn("refused a route from an address over its allowance of wrong cluster secrets", "addr", addr)
		return false
	}
	o := c.GetOpts()
	ok := o != nil && o.Username == a.user && subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.password)) == 1
	if !ok {
		a.failures.Allow(addr)
		a.log.Warn("refused a route with a wrong cluster secret", "addr", addr)
	}
	return ok
}
