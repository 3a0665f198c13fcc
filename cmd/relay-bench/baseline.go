package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// baselineServer is a bare net/http server on 127.0.0.1 that answers
// every request with the same bytes: what the relay returned for the
// get operation. Driving it the same way as the relay shows what this
// machine (and this generator) can serve at all over HTTP/1.1.
type baselineServer struct {
	srv  *http.Server
	addr string
}

// startBaseline serves body (with the relay's Content-Type) on a free
// port of 127.0.0.1, in this process.
func startBaseline(body []byte, contentType string) (*baselineServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	length := strconv.Itoa(len(body))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", length)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &baselineServer{srv: srv, addr: ln.Addr().String()}, nil
}

// close stops the server.
func (b *baselineServer) close() { _ = b.srv.Close() }

// fetchGet fetches the relay's answer to the get operation once: the
// bytes the baseline serves.
func fetchGet(ctx context.Context, base string, keys benchKeys) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/get?uuid="+ariaUUID, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("x-api-key", keys.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET /get: %s: %s", resp.Status, body)
	}
	return body, resp.Header.Get("Content-Type"), nil
}
