package connroute

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// clientPreface opens every HTTP/2 connection (RFC 9113, section 3.4).
var clientPreface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// HTTP/2 frame types and flags the router reads (RFC 9113, section 6).
const (
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameSettings     = 0x4
	framePing         = 0x6
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	frameHeaderLen = 9
	// defaultMaxFrameSize is the largest frame a client may send before it
	// has the server's settings, and the empty SETTINGS frame the router
	// sends keeps it so.
	defaultMaxFrameSize = 16384
	// defaultHeaderTableSize is HPACK's dynamic table size until settings
	// change it, which the router's settings do not.
	defaultHeaderTableSize = 4096
)

// emptySettings is a SETTINGS frame without parameters: every setting at
// its default.
var emptySettings = []byte{0, 0, 0, frameSettings, 0, 0, 0, 0, 0}

// maxSniffBytes bounds what the router reads of a connection before it
// decides: far more than a first request's headers take, so that only a
// client sending something else before them gets there.
const maxSniffBytes = 128 << 10

// errNotHTTP2 stops the frame reading for a connection that is HTTP/2 but
// not in a way the router follows; it goes to the HTTP server, which
// answers protocol errors properly.
var errNotHTTP2 = errors.New("connroute: unexpected HTTP/2 frames")

// sniffer reads the start of a connection into buf, keeping every byte to
// replay to the server the connection goes to.
type sniffer struct {
	conn net.Conn
	buf  []byte
	pos  int // start of the next frame in buf
	// ackDropped is set once the acknowledgement of the router's settings
	// was cut out of buf.
	ackDropped bool
}

// sniff reads the start of c and reports whether it goes to the gRPC
// transport, with the connection to hand over: c, replaying what was read.
func sniff(c net.Conn) (toGRPC bool, routed net.Conn, err error) {
	s := &sniffer{conn: c, buf: make([]byte, 0, 1024)}
	h2, err := s.preface()
	if err != nil {
		return false, nil, err
	}
	if !h2 {
		return false, &replayConn{Conn: c, pending: s.buf}, nil
	}
	if _, err := c.Write(emptySettings); err != nil {
		return false, nil, err
	}
	toGRPC, err = s.firstRequest()
	switch {
	case errors.Is(err, errNotHTTP2):
		toGRPC = false
	case err != nil:
		return false, nil, err
	}
	return toGRPC, &replayConn{Conn: c, pending: s.buf, awaitAck: !s.ackDropped}, nil
}

// preface reads until the bytes read either are the HTTP/2 client preface
// or cannot begin it.
func (s *sniffer) preface() (bool, error) {
	for {
		n := min(len(s.buf), len(clientPreface))
		if !bytes.Equal(s.buf[:n], clientPreface[:n]) {
			return false, nil
		}
		if n == len(clientPreface) {
			s.pos = n
			return true, nil
		}
		if err := s.read(); err != nil {
			return false, err
		}
	}
}

// read appends what the connection has to buf.
func (s *sniffer) read() error {
	if len(s.buf) == cap(s.buf) {
		s.buf = append(s.buf, 0)[:len(s.buf)]
	}
	n, err := s.conn.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf = s.buf[:len(s.buf)+n]
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// need reads until buf holds n bytes past pos.
func (s *sniffer) need(n int) error {
	if s.pos+n > maxSniffBytes {
		return errNotHTTP2
	}
	for len(s.buf) < s.pos+n {
		if err := s.read(); err != nil {
			return err
		}
	}
	return nil
}

// frame reads the header of the frame at pos, and its payload.
func (s *sniffer) frame() (typ, flags byte, streamID uint32, payload []byte, err error) {
	if err := s.need(frameHeaderLen); err != nil {
		return 0, 0, 0, nil, err
	}
	h := s.buf[s.pos : s.pos+frameHeaderLen]
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if length > defaultMaxFrameSize {
		return 0, 0, 0, nil, errNotHTTP2
	}
	if err := s.need(frameHeaderLen + length); err != nil {
		return 0, 0, 0, nil, err
	}
	streamID = (uint32(h[5])<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])) & 0x7fffffff
	payload = s.buf[s.pos+frameHeaderLen : s.pos+frameHeaderLen+length]
	return h[3], h[4], streamID, payload, nil
}

// firstRequest reads frames up to the first request's headers and reports
// whether they ask for gRPC.
func (s *sniffer) firstRequest() (bool, error) {
	for {
		typ, flags, streamID, payload, err := s.frame()
		if err != nil {
			return false, err
		}
		switch typ {
		case frameSettings:
			if flags&flagAck != 0 && len(payload) == 0 && !s.ackDropped {
				// The acknowledgement of the router's own settings: the
				// server never sent those, so it must not see it.
				s.buf = append(s.buf[:s.pos], s.buf[s.pos+frameHeaderLen:]...)
				s.ackDropped = true
				continue
			}
		case framePriority, framePing, frameWindowUpdate:
		case frameHeaders:
			block, err := s.headerBlock(flags, streamID, payload)
			if err != nil {
				return false, err
			}
			return isGRPC(block), nil
		default:
			// Data, resets or anything else before a request: not a
			// client the router needs to understand.
			return false, errNotHTTP2
		}
		s.pos += frameHeaderLen + len(payload)
	}
}

// headerBlock collects the header block of a HEADERS frame and of the
// CONTINUATION frames that follow it.
func (s *sniffer) headerBlock(flags byte, streamID uint32, payload []byte) ([]byte, error) {
	fragment := payload
	if flags&flagPadded != 0 {
		if len(fragment) < 1 || int(fragment[0]) >= len(fragment) {
			return nil, errNotHTTP2
		}
		fragment = fragment[1 : len(fragment)-int(fragment[0])]
	}
	if flags&flagPriority != 0 {
		if len(fragment) < 5 {
			return nil, errNotHTTP2
		}
		fragment = fragment[5:]
	}
	block := append([]byte(nil), fragment...)
	for flags&flagEndHeaders == 0 {
		s.pos += frameHeaderLen + len(payload)
		var typ byte
		var id uint32
		var err error
		typ, flags, id, payload, err = s.frame()
		if err != nil {
			return nil, err
		}
		if typ != frameContinuation || id != streamID {
			return nil, errNotHTTP2
		}
		block = append(block, payload...)
	}
	return block, nil
}

// isGRPC reports whether a request's header block has a content type that
// grpc-go serves: `application/grpc`, alone or followed by `+` or `;`.
func isGRPC(block []byte) bool {
	dec := hpack.NewDecoder(defaultHeaderTableSize, nil)
	dec.SetMaxStringLength(maxSniffBytes)
	fields, err := dec.DecodeFull(block)
	if err != nil {
		return false
	}
	for _, f := range fields {
		if f.Name != "content-type" {
			continue
		}
		rest, ok := strings.CutPrefix(f.Value, "application/grpc")
		return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
	}
	return false
}

// replayConn is a routed connection: its reads first return what the
// router read, then the connection's own bytes, without the client's
// acknowledgement of the router's settings when it comes after the
// router's look.
type replayConn struct {
	net.Conn
	pending []byte
	// awaitAck is set while the acknowledgement of the router's settings
	// is still to come: reads then go frame by frame, to drop it.
	awaitAck bool
	frame    []byte
}

// Read implements net.Conn.
func (c *replayConn) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		if !c.awaitAck {
			return c.Conn.Read(p)
		}
		if err := c.nextFrame(); err != nil {
			if len(c.pending) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		// The router's buffer is not held for the connection's life (an
		// event stream keeps its connection for hours).
		c.pending = nil
	}
	return n, nil
}

// nextFrame reads one whole frame into pending, or nothing when it is the
// acknowledgement to drop. A failure part way through a frame leaves the
// bytes read in pending and stops the frame reading.
func (c *replayConn) nextFrame() error {
	c.frame = slices.Grow(c.frame[:0], frameHeaderLen)[:frameHeaderLen]
	if n, err := io.ReadFull(c.Conn, c.frame); err != nil {
		if n > 0 {
			c.pending, c.awaitAck = c.frame[:n], false
		}
		return err
	}
	length := int(c.frame[0])<<16 | int(c.frame[1])<<8 | int(c.frame[2])
	c.frame = slices.Grow(c.frame, length)[:frameHeaderLen+length]
	if n, err := io.ReadFull(c.Conn, c.frame[frameHeaderLen:]); err != nil {
		c.pending, c.awaitAck = c.frame[:frameHeaderLen+n], false
		return err
	}
	if c.frame[3] == frameSettings && c.frame[4]&flagAck != 0 && length == 0 {
		c.awaitAck = false
		return nil
	}
	c.pending = c.frame
	return nil
}

// PlainConn returns the routed connection, to which this one writes
// unchanged (only its reads differ).
func (c *replayConn) PlainConn() net.Conn { return c.Conn }

// CloseWrite shuts down the writing side when the connection can, as
// net/http does before it closes an HTTP/1.1 connection.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
