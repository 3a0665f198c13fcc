package server

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"time"
)

// RequestIDs makes request ids of the form `<operation>_<digits>`. The digits
// are the time in milliseconds (13 digits), a node number (6 digits) and a
// per-process sequence (8 digits). Within one process two ids can only be
// equal if 10^8 ids were made in the same millisecond; across processes the
// node number tells them apart (set it per node in a cluster; by default it is
// random, which makes a clash between two relays one in a million per
// millisecond in which both issue an id with the same sequence).
type RequestIDs struct {
	node  uint32
	seq   atomic.Uint64
	clock func() time.Time
}

// NewRequestIDs returns a generator for the given node number (taken modulo
// 10^6); a negative node number picks a random one.
func NewRequestIDs(node int, clock func() time.Time) *RequestIDs {
	if clock == nil {
		clock = time.Now
	}
	if node < 0 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		node = int(binary.BigEndian.Uint32(b[:]) % 1_000_000)
	}
	return &RequestIDs{node: uint32(node % 1_000_000), clock: clock}
}

// New returns a fresh id for an operation.
func (g *RequestIDs) New(operation string) string {
	seq := g.seq.Add(1) % 100_000_000
	ms := g.clock().UnixMilli()
	// Room on the stack for any operation name of the contract: the id's
	// only allocation is its string.
	var room [64]byte
	buf := append(room[:0], operation...)
	buf = append(buf, '_')
	buf = strconv.AppendInt(buf, ms, 10)
	buf = appendPadded(buf, uint64(g.node), 6)
	buf = appendPadded(buf, seq, 8)
	return string(buf)
}

// appendPadded appends v in decimal, left-padded with zeros to width digits.
func appendPadded(buf []byte, v uint64, width int) []byte {
	var tmp [20]byte
	s := strconv.AppendUint(tmp[:0], v, 10)
	for i := len(s); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, s...)
}
