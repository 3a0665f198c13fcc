package script

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// Frames round-trip, and a reader refuses a frame over its limit or cut
// short without reading past it.
func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	in := &message{Kind: msgReply, ID: 7, Reply: &replyMessage{Error: toWireError(world.Errorf(world.ErrNotFound, "Entity not found: x"))}}
	if err := writeFrame(&buf, in); err != nil {
		t.Fatal(err)
	}
	frame := append([]byte(nil), buf.Bytes()...)
	out, err := readFrame(&buf, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != msgReply || out.ID != 7 || out.Reply == nil || out.Reply.Error == nil {
		t.Fatalf("got %+v", out)
	}
	if err := out.Reply.Error.toError(); !errors.Is(err, world.ErrNotFound) || err.Error() != "Entity not found: x" {
		t.Errorf("error %v", err)
	}
	if err := (&wireError{Message: "plain"}).toError(); err.Error() != "plain" || errors.Is(err, world.ErrInvalid) {
		t.Errorf("plain error %v", err)
	}

	if _, err := readFrame(bytes.NewReader(frame), len(frame)-5); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := readFrame(bytes.NewReader(frame[:len(frame)-1]), 1<<10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut short: %v", err)
	}
	if _, err := readFrame(bytes.NewReader(nil), 1<<10); !errors.Is(err, io.EOF) {
		t.Errorf("nothing: %v", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 2, '{', '!'}), 1<<10); err == nil {
		t.Error("malformed JSON accepted")
	}
}
