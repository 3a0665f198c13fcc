package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
)

// Credentials are what a caller presents in a request's headers: an API
// key, or for the event streams a browser's stream ticket.
type Credentials struct {
	APIKey string
	Ticket string
	// Authorization is the request's Authorization header, which the
	// relay does not read for keys: it only lets a refusal tell a caller
	// who sent a bearer token where the key belongs.
	Authorization string
}

// missingKey is the refusal of a call that presented no API key, which
// names the right header to a caller who sent a bearer token (see
// keys.MissingMessage).
func missingKey(authorization string) error {
	return status.Error(codes.Unauthenticated, keys.MissingMessage(authorization))
}

// keyChecker is a key store that can judge a presented key without
// copying its record out (keys.Store and the cluster's key store): all
// admission needs, on every request.
type keyChecker interface {
	Check(ctx context.Context, plaintext string) error
}

// DefaultAuthFailuresPerMinute is how many failed authentications a client
// address may make a minute before it is refused with 429.
const DefaultAuthFailuresPerMinute = 60

// Admit decides, from the headers alone and before any request body is read,
// whether a call may go on: public methods (health, reflection) always may;
// every other method needs a valid API key, or a valid stream ticket for the
// methods that accept one. Every entry calls it first: the HTTP handler
// for REST and SSE routes (with the route's RPC as method), the network
// gRPC server's tap (admitTap) and ServeHTTP for gRPC calls. The interceptor chain authenticates the call again
// when it runs, so Admit only keeps callers without valid credentials from
// costing the relay any work.
//
// Every refusal counts against the caller's address (remoteAddr, `host` or
// `host:port`): past the address's allowance of failures the refusal is
// ResourceExhausted with a retry delay (429 with Retry-After) instead of
// Unauthenticated. A valid key is never refused here, whatever its address
// did before, so a client behind the same address as an attacker keeps
// working.
func (s *Server) Admit(ctx context.Context, method string, creds Credentials, remoteAddr string) error {
	if isPublic(method) {
		return nil
	}
	var err error
	switch {
	case creds.APIKey != "":
		if c, ok := s.chain.Keys.(keyChecker); ok {
			err = c.Check(ctx, creds.APIKey)
		} else {
			_, err = s.chain.Keys.Authenticate(ctx, creds.APIKey)
		}
		if err != nil {
			err = toStatus(ctx, s.chain.Log, err)
		}
	case creds.Ticket != "" && acceptsTicket(method) && s.chain.Tickets != nil:
		err = s.chain.Tickets.Check(ctx, creds.Ticket)
	default:
		err = missingKey(creds.Authorization)
	}
	if err == nil {
		return nil
	}
	if ok, wait := s.authFailures.Allow(addressOf(remoteAddr)); !ok {
		return authFailuresExceeded(s.authFailures.perMinute, wait)
	}
	return err
}

// admitTap is the network gRPC server's grpc.InTapHandle: it runs Admit on
// a call's method, headers and peer address as soon as its headers arrive,
// before the call gets a goroutine or its message is read. A refusal ends
// the call at once with the refusal's status (details included), in the
// response headers.
func (s *Server) admitTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	var remote string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	creds := Credentials{APIKey: firstOf(info.Header, wire.APIKeyHeader), Ticket: firstOf(info.Header, wire.StreamTicketHeader), Authorization: firstOf(info.Header, "authorization")}
	if err := s.Admit(ctx, info.FullMethodName, creds, remote); err != nil {
		return ctx, err
	}
	return withRecvGuard(ctx, s.recvAllowance), nil
}

// firstOf is the first value of a metadata key, or "".
func firstOf(md metadata.MD, key string) string {
	if v := md[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// addressOf is the key a remote address's allowance is counted under: its
// host, an IPv6 host by its /64 as the connection caps count it, so that
// every connection of one client shares its allowance.
func addressOf(remoteAddr string) string {
	return netlimit.AddressKey(remoteAddr)
}

// authFailuresExceeded is the refusal of an address that failed to
// authenticate too often: 429 over REST, with a Retry-After header.
func authFailuresExceeded(perMinute int, wait time.Duration) error {
	return retryLater(wait, func(seconds int) string {
		return fmt.Sprintf("Too many failed authentications from this address: the limit is %d a minute; retry in %d s", perMinute, seconds)
	})
}
