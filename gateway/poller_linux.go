//go:build linux

package gateway

import (
	"errors"
	"runtime"
	"sync"
	"syscall"
)

// pollerSupported reports whether event streams may be detached from their
// handler's goroutine and watched by the poller (see sseWriter.detach).
const pollerSupported = true

// Events the poller asks for: readable (the peer sent bytes, or closed its
// side), the peer hung up, and, while a stream has bytes it could not
// write, writable. Edge-triggered: each change is reported once, and the
// poller reads until the descriptor has nothing more.
const (
	pollIn     = uint32(syscall.EPOLLIN | syscall.EPOLLRDHUP)
	pollOut    = uint32(syscall.EPOLLOUT)
	pollEdge   = uint32(1) << 31 // EPOLLET
	pollClosed = uint32(syscall.EPOLLHUP | syscall.EPOLLERR | syscall.EPOLLRDHUP)
)

// poller watches the connections of detached event streams with one epoll
// instance and one goroutine for the whole process: it notices a peer
// that went away, and hands the streams whose connection became writable
// again to a few writer goroutines. No goroutine waits on an idle stream.
type poller struct {
	epfd int
	// writable takes the streams whose connection can take bytes again,
	// for the writer goroutines.
	writable chan *sseWriter

	mu      sync.Mutex
	streams map[uint64]*sseWriter
	next    uint64
}

var (
	thePoller     *poller
	thePollerErr  error
	thePollerOnce sync.Once
)

// streamPoller returns the process's poller, started on first use.
func streamPoller() (*poller, error) {
	thePollerOnce.Do(func() {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			thePollerErr = err
			return
		}
		p := &poller{epfd: epfd, writable: make(chan *sseWriter, 1024), streams: map[uint64]*sseWriter{}}
		go p.wait()
		for range max(2, runtime.GOMAXPROCS(0)) {
			go p.write()
		}
		thePoller = p
	})
	return thePoller, thePollerErr
}

// add watches fd for s and returns the token that names the registration.
func (p *poller) add(fd int, s *sseWriter) (uint64, error) {
	p.mu.Lock()
	p.next++
	token := p.next
	p.streams[token] = s
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: pollIn | pollEdge, Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		p.mu.Lock()
		delete(p.streams, token)
		p.mu.Unlock()
		return 0, err
	}
	return token, nil
}

// watchWrites asks for the writable event of fd, or stops asking. A
// connection that is writable already is reported at once.
func (p *poller) watchWrites(fd int, token uint64, on bool) error {
	events := pollIn | pollEdge
	if on {
		events |= pollOut
	}
	ev := syscall.EpollEvent{Events: events, Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
	return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

// remove stops watching fd; the caller closes it afterwards.
func (p *poller) remove(fd int, token uint64) {
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	p.mu.Lock()
	delete(p.streams, token)
	p.mu.Unlock()
}

// wait takes the descriptors' events, for ever.
func (p *poller) wait() {
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 512)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			// Nothing else can fail on a valid epoll descriptor.
			panic("gateway: epoll_wait: " + err.Error())
		}
		for _, ev := range events[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			p.mu.Lock()
			s := p.streams[token]
			p.mu.Unlock()
			if s == nil {
				continue // closed meanwhile
			}
			if ev.Events&(pollIn|pollClosed) != 0 {
				s.readable(buf)
			}
			if ev.Events&pollOut != 0 {
				p.writable <- s
			}
		}
	}
}

// write writes what the streams handed to it kept, for ever.
func (p *poller) write() {
	for s := range p.writable {
		s.writable()
	}
}

// readFD reads what the connection has, without waiting: it returns 0 and
// nil when nothing is there, io.EOF-like errors otherwise (see readable).
func readFD(fd int, buf []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return 0, nil
		case err != nil:
			return 0, err
		case n == 0:
			return 0, errPeerGone
		}
		return n, nil
	}
}
