package link_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
)

// rawModule is a module that answers upload-file and download-file over a
// bare socket, allocating next to nothing while it does: it checks an
// upload's file as it streams by (a running hash), and sends a download's
// reply from a message it built beforehand. So what the process allocates
// during a transfer is the relay's doing.
type rawModule struct {
	ws       *websocket.Conn
	download []byte // the file's base64, sent in download-file's reply
	uploaded chan []byte
}

var headRE = regexp.MustCompile(`^\{"type":"([^"]+)","requestId":"([^"]+)"`)

// serve answers requests until the socket closes.
func (m *rawModule) serve(ctx context.Context) {
	buf := make([]byte, 64<<10)
	dst := make([]byte, 48<<10)
	for {
		_, r, err := m.ws.Reader(ctx)
		if err != nil {
			return
		}
		// The request's head (type, id, parameters) comes before the file.
		head := make([]byte, 0, 4096)
		marker := []byte(`"fileData":"data:application/octet-stream;base64,`)
		var rest []byte
		for {
			n, err := r.Read(buf[:min(len(buf), cap(head)-len(head))])
			head = append(head, buf[:n]...)
			if i := bytes.Index(head, marker); i >= 0 {
				rest = head[i+len(marker):]
				break
			}
			if err != nil || len(head) == cap(head) {
				break
			}
		}
		sub := headRE.FindSubmatch(head)
		if sub == nil {
			_, _ = io.Copy(io.Discard, r)
			continue
		}
		typ, id := string(sub[1]), string(sub[2])
		switch typ {
		case "upload-file":
			h := sha256.New()
			m.decodeInto(h, rest, r, buf, dst)
			m.uploaded <- h.Sum(nil)
			m.reply(ctx, []byte(`{"type":"upload-file-result","requestId":"`+id+`","success":true,"path":"big/big.bin"}`), nil, nil)
		case "download-file":
			_, _ = io.Copy(io.Discard, r)
			m.reply(ctx, []byte(`{"type":"download-file-result","requestId":"`+id+`","success":true,"path":"big/big.bin","filename":"big.bin","mimeType":"application/octet-stream","fileData":"data:application/octet-stream;base64,`),
				m.download, []byte(`"}`))
		default:
			_, _ = io.Copy(io.Discard, r)
		}
	}
}

// decodeInto decodes the base64 of an upload (up to its closing quote)
// into h, reading r through buf.
func (m *rawModule) decodeInto(h hash.Hash, first []byte, r io.Reader, buf, dst []byte) {
	s := &b64Sink{h: h, dst: dst, carry: make([]byte, 0, 4)}
	s.feed(first)
	for !s.done {
		n, err := r.Read(buf)
		s.feed(buf[:n])
		if err != nil {
			return
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// b64Sink decodes base64 fed in pieces of any length into a hash, until a
// closing quote.
type b64Sink struct {
	h     hash.Hash
	dst   []byte
	carry []byte
	done  bool
}

func (s *b64Sink) feed(p []byte) {
	if s.done {
		return
	}
	if q := bytes.IndexByte(p, '"'); q >= 0 {
		p, s.done = p[:q], true
	}
	if len(s.carry) > 0 {
		take := min(4-len(s.carry), len(p))
		s.carry, p = append(s.carry, p[:take]...), p[take:]
		if len(s.carry) < 4 {
			return
		}
		n, _ := base64.StdEncoding.Decode(s.dst, s.carry)
		s.h.Write(s.dst[:n])
		s.carry = s.carry[:0]
	}
	for len(p) >= 4 {
		whole := min(len(p)/4*4, len(s.dst)/3*4)
		n, _ := base64.StdEncoding.Decode(s.dst, p[:whole])
		s.h.Write(s.dst[:n])
		p = p[whole:]
	}
	s.carry = append(s.carry, p...)
}

// reply writes one message from its parts, without joining them.
func (m *rawModule) reply(ctx context.Context, head, body, tail []byte) {
	w, err := m.ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		return
	}
	for _, p := range [][]byte{head, body, tail} {
		if _, err := w.Write(p); err != nil {
			return
		}
	}
	_ = w.Close()
}

// allocated returns the bytes the process allocates while fn runs.
func allocated(fn func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLargeFilesAreHeldOnce: a file uploaded to and downloaded from a
// linked world crosses the socket as one base64 message, and the relay
// holds that message once and no more: what the whole process allocates
// during each transfer stays under 1.8 times the file's size, while the
// base64 message alone is 1.33 times it, so any second full copy (of the
// message, or of the decoded file) fails the test. The file is 8 MiB, and
// 64 MiB (the largest the default message limit allows a download) with
// RELAY_LINK_FILE_FULL=1. The module end is a bare socket that allocates
// next to nothing (rawModule).
func TestLargeFilesAreHeldOnce(t *testing.T) {
	size := 8 << 20
	if os.Getenv("RELAY_LINK_FILE_FULL") != "" {
		size = 64 << 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(t)
	tt := e.tabletop()
	if _, err := tt.Pair(ctx, e.code("")); err != nil {
		t.Fatal(err)
	}
	clientID, token := tt.Credentials()
	ws, _, err := websocket.Dial(ctx, tt.ConnectURL(), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://localhost:30000"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	auth, _ := json.Marshal(map[string]string{"type": "auth", "token": token})
	if err := ws.Write(ctx, websocket.MessageText, auth); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || !bytes.Contains(msg, []byte("auth-success")) {
		t.Fatalf("auth: %s %v", msg, err)
	}
	file := make([]byte, size)
	_, _ = rand.Read(file)
	want := sha256.Sum256(file)
	m := &rawModule{ws: ws, download: []byte(base64.StdEncoding.EncodeToString(file)), uploaded: make(chan []byte, 1)}
	go m.serve(ctx)
	e.wait("the connection", func() bool { return e.svc.Hub().Online(clientID) })
	w := link.NewLinked(e.svc.Hub(), clientID, world.Info{})
	limit := uint64(size) * 18 / 10

	var written world.FileWritten
	up := allocated(func() {
		written, err = w.WriteFile(ctx, nil, world.WriteFileParams{Dir: "big", Name: "big.bin", MaxBytes: int64(size)}, bytes.NewReader(file))
	})
	if err != nil || written.Size != int64(size) || written.Path != "big/big.bin" {
		t.Fatalf("upload: %+v %v", written, err)
	}
	if got := <-m.uploaded; !bytes.Equal(got, want[:]) {
		t.Fatal("the module received another file")
	}
	t.Logf("upload of %d MiB: %.1f MiB allocated", size>>20, float64(up)/(1<<20))
	if up > limit {
		t.Errorf("an upload of %d bytes allocated %d bytes (over %d): the relay held the file more than once", size, up, limit)
	}

	var got [sha256.Size]byte
	buf := make([]byte, 32<<10)
	down := allocated(func() {
		f, err := w.OpenFile(ctx, nil, "big/big.bin")
		if err != nil {
			t.Error(err)
			return
		}
		if f.Size != int64(size) {
			t.Errorf("size %d, want %d", f.Size, size)
		}
		h := sha256.New()
		if _, err := io.CopyBuffer(h, f.Body, buf); err != nil {
			t.Error(err)
		}
		h.Sum(got[:0])
	})
	if got != want {
		t.Fatal("the download decoded to another file")
	}
	t.Logf("download of %d MiB: %.1f MiB allocated", size>>20, float64(down)/(1<<20))
	if down > limit {
		t.Errorf("a download of %d bytes allocated %d bytes (over %d): the relay held the file more than once", size, down, limit)
	}
}
