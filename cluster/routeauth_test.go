package cluster

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// fakeRoute is a route connecting from addr with a user and password.
type fakeRoute struct {
	addr       string
	user, pass string
}

func (f fakeRoute) GetOpts() *natsserver.ClientOpts {
	return &natsserver.ClientOpts{Username: f.user, Password: f.pass}
}
func (f fakeRoute) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (f fakeRoute) RegisterUser(*natsserver.User)               {}
func (f fakeRoute) RemoteAddress() net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", f.addr)
	return a
}
func (f fakeRoute) GetNonce() []byte { return nil }
func (f fakeRoute) Kind() int        { return natsserver.ROUTER }
func (f fakeRoute) GetID() uint64    { return 1 }

// TestRouteAuthLimitsWrongSecrets: wrong cluster secrets are limited per
// address (an IPv6 host by its /64); past the limit even the right secret
// is refused from that address, while a peer elsewhere that knows it
// still joins.
func TestRouteAuthLimitsWrongSecrets(t *testing.T) {
	secret := strings.Repeat("k", 40)
	a := newRouteAuth(routeUser, secret, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !a.Check(fakeRoute{addr: "192.0.2.1:6222", user: routeUser, pass: secret}) {
		t.Fatal("the right secret was refused")
	}
	for i := range RouteFailuresPerMinute {
		addr := net.JoinHostPort("2001:db8:5:5::"+strings.Repeat("1", i%4+1), "6222")
		if a.Check(fakeRoute{addr: addr, user: routeUser, pass: "guess"}) {
			t.Fatal("a wrong secret was taken")
		}
	}
	if a.Check(fakeRoute{addr: "[2001:db8:5:5::99]:6222", user: routeUser, pass: secret}) {
		t.Fatal("the right secret from a /64 past its allowance of wrong ones was taken")
	}
	if !a.Check(fakeRoute{addr: "[2001:db8:5:6::1]:6222", user: routeUser, pass: secret}) {
		t.Fatal("the right secret from another /64 was refused")
	}
	if a.Check(fakeRoute{addr: "192.0.2.1:6222", user: "other", pass: secret}) {
		t.Fatal("another user was taken")
	}
}
