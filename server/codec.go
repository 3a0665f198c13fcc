package server

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/jsonvalue"
)

// Marshal encodes a response as grpc-go's codec does, into a buffer of
// responsePool.
//
// grpc-go's own codec takes its buffers from its default pool, whose
// classes jump from 32 KiB to 1 MiB and which clears the whole of every
// buffer it hands out: a 33 KB document, the common read, took a 1 MiB
// buffer and cleared it on every call, which was half of the relay's CPU
// per gRPC read and hundreds of megabytes of resident memory under load.
// The encoder writes every byte of the buffer it is given, so responsePool
// need not clear anything, and its classes are powers of two.
func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	if jsonvalue.MayHoldRaw(m.ProtoReflect().Descriptor()) {
		return marshalExternal(m)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := responses.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		responses.Put(buf)
		return nil, err
	}
	if len(out) != size || &out[0] != &(*buf)[0] {
		// The message changed under the encoder; never hand the pool a
		// buffer it did not make.
		return nil, fmt.Errorf("marshal %T: %d bytes, %d expected", m, len(out), size)
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, responses)}, nil
}

// marshalExternal encodes a response that may hold raw Values (JSON text
// the relay keeps serialised, see package jsonvalue) as a gRPC caller must
// receive it: each raw Value transcoded into the Value tree its JSON
// stands for, straight from the text. The message is encoded as usual
// first, into a scratch buffer, and then rewritten into the response
// buffer; nothing in the message changes, so a message sent to several
// callers (an event) may be encoded by all of them at once.
func marshalExternal(m proto.Message) (mem.BufferSlice, error) {
	size := proto.Size(m)
	scratch := responses.Get(size)
	defer responses.Put(scratch)
	encoded, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*scratch)[:0], m)
	if err != nil {
		// A raw Value whose text is not UTF-8 (from a linked tabletop)
		// cannot be a string_value: encode a copy with the text repaired.
		// Nothing else in a response fails to encode.
		if encoded, err = proto.Marshal(jsonvalue.Sanitized(m)); err != nil {
			return nil, err
		}
	}
	// A Value tree is larger than its JSON (every number takes nine
	// bytes); twice the size is a generous first guess.
	buf := responses.Get(2 * size)
	out, err := jsonvalue.Externalize((*buf)[:0], encoded, m.ProtoReflect().Descriptor())
	if err != nil {
		responses.Put(buf)
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	if cap(out) != cap(*buf) {
		// The guess was short and the output moved to a slice of its own.
		responses.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(out)}, nil
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, responses)}, nil
}

// receivePool is the gRPC servers' pool of buffers for what they read:
// grpc-go's own kind of pool (it clears each buffer it hands out), with a
// class for every power of two from 256 bytes to 4 MiB.
var receivePool = func() mem.BufferPool {
	pool, err := mem.NewBinaryTieredBufferPool(8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22)
	if err != nil {
		panic(err)
	}
	return pool
}()

// responses is the pool of response buffers.
var responses = &bufferPool{}

// Bounds of bufferPool's classes: buffers from 2^minPoolClass to
// 2^maxPoolClass bytes are pooled; larger ones are allocated for each
// response.
const (
	minPoolClass = 10
	maxPoolClass = 22
)

// bufferPool is a mem.BufferPool of buffers whose capacities are powers of
// two, one sync.Pool per power, which hands out buffers as they were left:
// its users write every byte they read.
type bufferPool struct {
	classes [maxPoolClass + 1]sync.Pool
}

// class is the power of two a buffer of size bytes comes from.
func class(size int) int {
	return max(bits.Len(uint(size-1)), minPoolClass)
}

// Get returns a buffer of length size.
func (p *bufferPool) Get(size int) *[]byte {
	c := class(size)
	if c > maxPoolClass {
		buf := make([]byte, size)
		return &buf
	}
	if buf, ok := p.classes[c].Get().(*[]byte); ok {
		*buf = (*buf)[:size]
		return buf
	}
	buf := make([]byte, size, 1<<c)
	return &buf
}

// Put takes back a buffer of the pool's.
func (p *bufferPool) Put(buf *[]byte) {
	capacity := cap(*buf)
	c := class(capacity)
	if c > maxPoolClass || capacity != 1<<c {
		return
	}
	p.classes[c].Put(buf)
}
