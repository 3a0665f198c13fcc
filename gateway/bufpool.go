package gateway

import (
	"context"
	"sync"
)

// Response bodies are recycled: a REST read answers with a whole document,
// often tens of kilobytes, and allocating (and zeroing) a fresh buffer for
// each answer was most of the bytes a busy relay allocated. The buffer's
// owner is explicit: serveHTTP puts a responseBuffer in the request's
// context, the marshaler fills its buffer, grpc-gateway writes the bytes to
// the connection before the mux returns, and serveHTTP then gives the
// buffer back to the pool.

// maxPooledBuffer is the largest buffer kept for reuse; a rare huge answer
// should not pin its memory.
const maxPooledBuffer = 1 << 20

var bufferPool = sync.Pool{New: func() any { return new([]byte) }}

// responseBuffer is one request's claim on a pooled buffer.
type responseBuffer struct {
	buf *[]byte // nil until the marshaler takes one
	// operation is the operation of the request's route, for the
	// envelope and the error body (see operationOf).
	operation string
}

type responseBufferKey struct{}

// withResponseBuffer returns ctx carrying a fresh claim, and the claim.
func withResponseBuffer(ctx context.Context) (context.Context, *responseBuffer) {
	rb := &responseBuffer{}
	return context.WithValue(ctx, responseBufferKey{}, rb), rb
}

// responseBufferFrom returns the request's claim, or nil.
func responseBufferFrom(ctx context.Context) *responseBuffer {
	rb, _ := ctx.Value(responseBufferKey{}).(*responseBuffer)
	return rb
}

// take returns an empty buffer for the answer, from the pool when the
// request has a claim (the claim then owns it), else a fresh one.
func (rb *responseBuffer) take(size int) []byte {
	if rb == nil || rb.buf != nil {
		return make([]byte, 0, size)
	}
	rb.buf = bufferPool.Get().(*[]byte)
	if cap(*rb.buf) < size {
		*rb.buf = make([]byte, 0, size)
	}
	return (*rb.buf)[:0]
}

// keep records the buffer the answer ended in (it may have grown), so that
// release recycles that one.
func (rb *responseBuffer) keep(b []byte) {
	if rb != nil && rb.buf != nil {
		*rb.buf = b
	}
}

// release gives the buffer back once the answer has been written.
func (rb *responseBuffer) release() {
	if rb == nil || rb.buf == nil {
		return
	}
	if cap(*rb.buf) <= maxPooledBuffer {
		*rb.buf = (*rb.buf)[:0]
		bufferPool.Put(rb.buf)
	}
	rb.buf = nil
}
