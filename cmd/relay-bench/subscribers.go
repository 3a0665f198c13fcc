package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// subscribers are open SSE streams on /actor/subscribe counting the
// events they receive.
type subscribers struct {
	events atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	// failed is the first stream error after the stream was opened.
	failed error
}

// openSubscribers opens n streams, each on its own connection, and
// returns once every one has answered 200.
func openSubscribers(ctx context.Context, base, key string, n int) (*subscribers, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &subscribers{cancel: cancel}
	opened := make(chan error, n)
	for range n {
		s.wg.Go(func() { s.stream(ctx, base, key, opened) })
	}
	for range n {
		select {
		case err := <-opened:
			if err != nil {
				s.close()
				return nil, err
			}
		case <-time.After(30 * time.Second):
			s.close()
			return nil, fmt.Errorf("SSE subscribers: not all %d streams opened within 30s", n)
		}
	}
	return s, nil
}

// stream holds one stream open and counts its events (their data lines)
// until the context ends.
func (s *subscribers) stream(ctx context.Context, base, key string, opened chan<- error) {
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/actor/subscribe", nil)
	if err != nil {
		opened <- err
		return
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		opened <- fmt.Errorf("SSE subscribe: %w", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		opened <- fmt.Errorf("SSE subscribe: %s", resp.Status)
		return
	}
	opened <- nil
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("data:")) {
			s.events.Add(1)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		s.mu.Lock()
		if s.failed == nil {
			s.failed = err
		}
		s.mu.Unlock()
	} else if ctx.Err() == nil {
		s.mu.Lock()
		if s.failed == nil {
			s.failed = fmt.Errorf("SSE stream ended by the relay")
		}
		s.mu.Unlock()
	}
}

// err is the first failure of an opened stream, or nil.
func (s *subscribers) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// close ends every stream and waits for them.
func (s *subscribers) close() {
	s.cancel()
	s.wg.Wait()
}
