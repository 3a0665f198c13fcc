// Package wire names what travels on the wire between the relay's parts
// and to its callers, once for every package that writes or reads it: the
// header and metadata names, the error reasons, the REST envelope's fields
// and the names of the events the streams add to the world's own. It
// imports nothing, so that every layer may use it.
package wire

// Header and metadata names. gRPC metadata keys are lower case; HTTP
// header names are matched without regard to case, so one spelling serves
// both.
const (
	// APIKeyHeader carries the caller's API key: an HTTP header, forwarded
	// by the gateway as gRPC metadata of the same name.
	APIKeyHeader = "x-api-key"
	// RequestIDHeader carries the request id back: in the response header
	// and trailer metadata of a gRPC call, and as the HTTP response header
	// of a REST call.
	RequestIDHeader = "x-request-id"
	// StreamTicketHeader is the metadata carrying a browser's stream
	// ticket, which the gateway reads from an event stream's TicketParam
	// query parameter.
	StreamTicketHeader = "x-stream-ticket"
	// InvalidParamsHeader is the metadata in which the gateway hands the
	// server the reason it could not read a REST call's parameters; the
	// last step of the server's interceptor chain refuses the call with it
	// (see server.Chain).
	InvalidParamsHeader = "relay-invalid-params-bin"
	// LastEventIDHeader is the HTTP header in which an EventSource names
	// the last event it received when it reconnects.
	LastEventIDHeader = "Last-Event-ID"
	// IdempotencyKeyHeader carries a write's idempotency key: an HTTP
	// header (Idempotency-Key), forwarded by the gateway as gRPC metadata
	// of the same name.
	IdempotencyKeyHeader = "idempotency-key"
	// IdempotentReplayHeader marks the answer to a write whose idempotency
	// key was used before: response header metadata, and an HTTP response
	// header, holding the request id of the first request, whose answer
	// this is.
	IdempotentReplayHeader = "idempotent-replay"
)

// TicketParam is the query parameter of an event stream that carries a
// stream ticket (browsers' EventSource cannot send headers).
const TicketParam = "ticket"

// Reasons the server attaches to an error as an errdetails.ErrorInfo (in
// ErrorDomain) where the HTTP status of the contract does not follow from
// the gRPC code alone.
const (
	// ReasonTooLarge marks a ResourceExhausted error as 413 Payload Too
	// Large: a request body or message over the size limit.
	ReasonTooLarge = "TOO_LARGE"
	// ReasonRateLimited marks a ResourceExhausted error as 429 Too Many
	// Requests.
	ReasonRateLimited = "RATE_LIMITED"
	// ErrorDomain is the ErrorInfo domain of the relay's reasons.
	ErrorDomain = "relay"
)

// The REST envelope: `{"type", "requestId", "data"}` on success and
// `{"type", "requestId", "error"}` on failure, where type is the
// operation's name followed by ResultSuffix.
const (
	EnvelopeType      = "type"
	EnvelopeRequestID = "requestId"
	EnvelopeData      = "data"
	EnvelopeError     = "error"
	ResultSuffix      = "-result"
)

// ErrorOperation is the operation name of a failure that belongs to no
// operation (an unknown path, a refused connection): its type is
// "error-result".
const ErrorOperation = "error"

// Names of the events the streams add to the world's own, on gRPC
// (Event.name) and as SSE event names alike.
const (
	// EventConnected is every stream's first message, sent at once.
	EventConnected = "connected"
	// EventReset tells a resuming subscriber that its last event is no
	// longer kept: it must reload what it follows.
	EventReset = "reset"
	// EventOverflow is the last message of a stream whose subscriber fell
	// too far behind; it names the event to resume from.
	EventOverflow = "overflow"
)

// Event is a live event as a stream writes it, handed from the server to
// the SSE bridge without a message of its own (see server.EventFrameWriter):
// its sequence number, its name and its payload, one JSON value shared by
// every stream that receives it, so never changed.
type Event struct {
	Seq  uint64
	Name string
	Data []byte
}
