package script

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// The protocol between a [Pool] and its workers: each message is a frame of
// a 4-byte big-endian length followed by that many bytes of JSON (one
// [message]). The parent writes to the worker's standard input, the worker
// to its standard output; standard error is left to the Go runtime, whose
// fatal errors (out of memory) tell the parent why a worker died.
//
//	worker → parent  hello                 once, as soon as the worker runs
//	parent → worker  start                 the script, its limits, the world
//	worker → parent  call     (any number) a game.* call to run in the world
//	parent → worker  reply    (one per call, same id)
//	worker → parent  done                  the result or the error; then it exits

// Message kinds.
const (
	msgHello = "hello"
	msgStart = "start"
	msgCall  = "call"
	msgReply = "reply"
	msgDone  = "done"
)

// message is one frame. Only the fields of its kind are set.
type message struct {
	Kind string `json:"kind"`
	// ID pairs a call with its reply.
	ID uint64 `json:"id,omitempty"`

	Start *startMessage `json:"start,omitempty"`
	Call  *callMessage  `json:"call,omitempty"`
	Reply *replyMessage `json:"reply,omitempty"`
	Done  *doneMessage  `json:"done,omitempty"`
}

// startMessage hands the worker its script.
type startMessage struct {
	Script  string      `json:"script"`
	Options wireOptions `json:"options"`
	World   world.Info  `json:"world"`
}

// wireOptions are the [Options] a worker runs with.
type wireOptions struct {
	Timeout time.Duration `json:"timeout"`
	// Deadline is when the time limit passes, by the wall clock that
	// parent and worker share: the world calls the parent makes for the
	// script end at the same moment as the script.
	Deadline       time.Time `json:"deadline"`
	MaxScriptBytes int       `json:"maxScriptBytes"`
	MaxResultBytes int       `json:"maxResultBytes"`
}

// callMessage is a game.* call: Method names the [World] method, and the
// fields it needs are set.
type callMessage struct {
	Method    string                 `json:"method"`
	UUID      string                 `json:"uuid,omitempty"`
	Data      world.Document         `json:"data"`
	Search    *world.SearchParams    `json:"search,omitempty"`
	Create    *world.CreateParams    `json:"create,omitempty"`
	Structure *world.StructureParams `json:"structure,omitempty"`
}

// World methods a worker may call.
const (
	callGet       = "get"
	callSearch    = "search"
	callUpdate    = "update"
	callCreate    = "create"
	callDelete    = "delete"
	callUsers     = "users"
	callStructure = "structure"
)

// replyMessage is the outcome of a call: a JSON value or an error.
type replyMessage struct {
	Value json.RawMessage `json:"value,omitempty"`
	Error *wireError      `json:"error,omitempty"`
}

// doneMessage is the outcome of the script.
type doneMessage struct {
	Value         json.RawMessage `json:"value,omitempty"`
	Logs          []string        `json:"logs,omitempty"`
	LogsTruncated bool            `json:"logsTruncated,omitempty"`
	Error         *wireError      `json:"error,omitempty"`
}

// wireError carries an error across: a world error keeps its kind (by the
// kind's text); any other error has an empty Kind.
type wireError struct {
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message"`
}

// errorKinds are the world error kinds by their text.
var errorKinds = map[string]error{}

func init() {
	for _, kind := range []error{world.ErrInvalid, world.ErrNotFound, world.ErrPermission, world.ErrConflict,
		world.ErrFailedPrecondition, world.ErrUnavailable, world.ErrTooLarge, world.ErrTimeout} {
		errorKinds[kind.Error()] = kind
	}
}

// toWireError encodes err for the other side.
func toWireError(err error) *wireError {
	var werr *world.Error
	if errors.As(err, &werr) && werr.Kind != nil {
		return &wireError{Kind: werr.Kind.Error(), Message: werr.Msg}
	}
	return &wireError{Message: err.Error()}
}

// toError decodes an error from the other side: a world error of the same
// kind, or a plain error.
func (e *wireError) toError() error {
	if kind, ok := errorKinds[e.Kind]; ok {
		return &world.Error{Kind: kind, Msg: e.Message}
	}
	return errors.New(e.Message)
}

// encodeFrame encodes one message as a frame.
func encodeFrame(m *message) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(body) > math.MaxUint32 {
		return nil, errFrameTooLarge
	}
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	return frame, nil
}

// writeFrame writes one message.
func writeFrame(w io.Writer, m *message) error {
	frame, err := encodeFrame(m)
	if err != nil {
		return err
	}
	_, err = w.Write(frame)
	return err
}

// errFrameTooLarge is a frame over the reader's limit.
var errFrameTooLarge = errors.New("message over the size limit")

// readFrame reads one message of at most limit bytes of JSON.
func readFrame(r io.Reader, limit int) (*message, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errFrameTooLarge, n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	return &m, nil
}
