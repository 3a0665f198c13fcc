package connroute

import (
	"errors"
	"net"
	"sync"
)

// Join returns a listener that accepts the connections of every one of
// listeners, so that one connection cap and one router serve several
// ports. Its address is the first listener's; closing it closes them all.
func Join(listeners ...net.Listener) net.Listener {
	j := &joined{listeners: listeners, accepted: make(chan accepted), closed: make(chan struct{})}
	for _, l := range listeners {
		go j.acceptFrom(l)
	}
	return j
}

// accepted is the outcome of one Accept of a joined listener.
type accepted struct {
	conn net.Conn
	err  error
}

type joined struct {
	listeners []net.Listener
	accepted  chan accepted
	closed    chan struct{}
	closeOnce sync.Once
}

// acceptFrom passes on what l accepts until l is closed.
func (j *joined) acceptFrom(l net.Listener) {
	for {
		c, err := l.Accept()
		select {
		case j.accepted <- accepted{c, err}:
		case <-j.closed:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept returns the next connection of any of the listeners, or the
// error one of them failed with.
func (j *joined) Accept() (net.Conn, error) {
	select {
	case a := <-j.accepted:
		if errors.Is(a.err, net.ErrClosed) {
			// One port closed alone (it should not): the others go on
			// only if the joined listener is not closed.
			_ = j.Close()
		}
		return a.conn, a.err
	case <-j.closed:
		return nil, net.ErrClosed
	}
}

// Close closes every listener.
func (j *joined) Close() error {
	var errs []error
	j.closeOnce.Do(func() {
		close(j.closed)
		for _, l := range j.listeners {
			errs = append(errs, l.Close())
		}
	})
	return errors.Join(errs...)
}

// Addr is the first listener's address.
func (j *joined) Addr() net.Addr { return j.listeners[0].Addr() }

// SameAddr reports whether a connection's local address is on the
// listening address listen: the same port, and the same IP unless listen
// is on every address (0.0.0.0 or ::).
func SameAddr(local, listen net.Addr) bool {
	l, ok1 := local.(*net.TCPAddr)
	want, ok2 := listen.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return local.String() == listen.String()
	}
	if l.Port != want.Port {
		return false
	}
	return want.IP.IsUnspecified() || l.IP.Equal(want.IP)
}
