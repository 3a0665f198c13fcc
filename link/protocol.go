package link

import (
	"encoding/json"
	"slices"

	"github.com/coder/websocket"

	"github.com/tabletop-relay/relay/world"
)

// StatusCode is a WebSocket close code.
type StatusCode = websocket.StatusCode

// Close codes of the module's protocol (reference §1.5, §1.9). The module
// reconnects after every code but 1000, 1008, 4001, 4002 and 4004; after
// 1008, 4001 and 4002 it forgets its token and asks the game master to pair
// again; after 4004 it waits for the other connection to go away.
const (
	// CloseNormal: the relay ended the connection for good (the module
	// unpaired itself); the module does not come back after it.
	CloseNormal = websocket.StatusNormalClosure
	// CloseGoingAway: the peer stopped answering pings.
	CloseGoingAway = websocket.StatusGoingAway
	// CloseAuthFailed: the token is unknown or revoked, or belongs to
	// another world (1008, "Authentication failed").
	CloseAuthFailed = websocket.StatusPolicyViolation
	// CloseTooBig: a message was larger than the limit (1009).
	CloseTooBig = websocket.StatusMessageTooBig
	// CloseNoAuth: no auth message in time, or not a valid one (4002).
	CloseNoAuth websocket.StatusCode = 4002
	// CloseDuplicate: another live connection serves the world (4004).
	CloseDuplicate websocket.StatusCode = 4004
	// CloseShutdown: the relay is stopping, or the world was paired again
	// and must reconnect with its new token (4005).
	CloseShutdown websocket.StatusCode = 4005
)

// Message types the relay and the module exchange besides requests and
// their `<type>-result` replies.
const (
	typeAuth         = "auth"
	typeAuthSuccess  = "auth-success"
	typePing         = "ping"
	typePong         = "pong"
	typePlayerList   = "player-list"
	typeModuleNotify = "module-notify"
	typeSubscription = "event-subscription-update"
	typeRemote       = "remote-request"
	typeRemoteReply  = "remote-response"
)

// EventTypes are the message types the module sends for its event channels
// (reference §7); [Hub] hands each such message to the event callback.
var EventTypes = []string{"roll-data", "chat-event", "hook-event", "combat-event", "actor-event", "scene-event"}

// Channels are the event channels the module turns on and off on request
// (`event-subscription-update`).
var Channels = []string{"roll-events", "chat-events", "hooks", "combat-events", "actor-events", "scene-events"}

// isEventType reports whether t is one of EventTypes.
func isEventType(t string) bool { return slices.Contains(EventTypes, t) }

// Event is one event message of a linked world.
type Event struct {
	// Type is the message type, one of EventTypes.
	Type string
	// Message is the whole message as the module sent it; the payload is
	// under `data` (reference §7). It is nil for a message the relay did
	// not keep because it was larger than the hub's MaxEventBytes: Size is
	// then its length.
	Message json.RawMessage
	Size    int64
}

// Player is a user of a linked world, from the module's `player-list`.
type Player struct {
	ID     string     `json:"id"`
	Name   string     `json:"name"`
	Role   world.Role `json:"role"`
	Active bool       `json:"active"`
}

// User is the player as a world user, for the permission rules.
func (p Player) User() world.User { return world.User{ID: p.ID, Name: p.Name, Role: p.Role} }

// header is what the relay reads of every message before dispatching it.
type header struct {
	Type      string          `json:"type"`
	RequestID json.RawMessage `json:"requestId"`
}

// requestID returns the message's requestId when it is a non-empty string.
func (h header) requestID() string {
	var id string
	if len(h.RequestID) == 0 || h.RequestID[0] != '"' || json.Unmarshal(h.RequestID, &id) != nil {
		return ""
	}
	return id
}
