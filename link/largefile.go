package link

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// The module takes and gives files whole, as a base64 data URL in one
// message (reference §6): `upload-file` with `fileData`, and the reply of
// `download-file`. The relay holds each such message whole once and no
// more (see chunks.go): an upload's file is encoded as it is read into the
// buffer the socket writes from, and a download's file is decoded from the
// message, as received, while the caller reads it. The size rules are the
// module's and the relay's: an upload over WriteFileParams.MaxBytes (the
// relay's --max-upload-bytes) is refused before anything is sent, a reply
// over the hub's MaxMessageBytes closes the connection (1009).

// uploadPrefix starts the data URL of an upload: the module stores the
// bytes as they are, whatever the type.
const uploadPrefix = `"data:application/octet-stream;base64,`

// WriteFile implements [world.Files] with the module's `upload-file`: the
// body is read (up to p.MaxBytes, over which the write is ErrTooLarge and
// nothing is sent), encoded as it is read into the only copy the relay
// holds, and written to the socket from there. The module writes the file
// itself, with its own checks.
func (w *Linked) WriteFile(ctx context.Context, user *world.User, p world.WriteFileParams, body io.Reader) (world.FileWritten, error) {
	dir, name, err := cleanUpload(p.Dir, p.Name)
	if err != nil {
		return world.FileWritten{}, err
	}
	if p.MaxBytes > 0 {
		body = io.LimitReader(body, p.MaxBytes+1)
	}
	value := &chunks{}
	value.WriteString(uploadPrefix)
	b64 := base64.NewEncoder(base64.StdEncoding, value)
	n, err := io.Copy(b64, body)
	if err != nil {
		return world.FileWritten{}, err
	}
	_ = b64.Close()
	value.WriteString(`"`)
	if p.MaxBytes > 0 && n > p.MaxBytes {
		return world.FileWritten{}, world.Errorf(world.ErrTooLarge, "File is larger than %d bytes", p.MaxBytes)
	}
	params := map[string]any{"path": dir, "filename": name, "source": "data", "mimeType": "application/octet-stream"}
	param(params, "overwrite", p.Overwrite)
	r := w.hub.callLarge(ctx, w.clientID, "upload-file", w.prepare(ctx, user, params), "fileData", value, false)
	if r.err != nil {
		return world.FileWritten{}, r.err
	}
	defer r.release()
	reply, err := w.check("upload-file", r.joined())
	if err != nil {
		return world.FileWritten{}, err
	}
	var path string
	if err := reply.decode("path", &path); err != nil {
		return world.FileWritten{}, badReply(w.clientID, "upload-file", err.Error())
	}
	return world.FileWritten{Path: strings.TrimPrefix(path, "/"), Size: n}, nil
}

// OpenFile implements [world.Files] with the module's `download-file`,
// whose reply holds the whole file as a base64 data URL (bounded by the
// hub's MaxMessageBytes). The reply is kept as it was received, and the
// file's body decodes it as the caller reads.
func (w *Linked) OpenFile(ctx context.Context, user *world.User, path string) (*world.FileContent, error) {
	path, err := cleanFilePath(path)
	if err != nil {
		return nil, err
	}
	r := w.hub.callLarge(ctx, w.clientID, "download-file", w.prepare(ctx, user, map[string]any{"path": path}), "", nil, true)
	if r.err != nil {
		return nil, r.err
	}
	msg := r.large
	if msg == nil {
		msg = &chunks{bufs: [][]byte{r.msg}, n: int64(len(r.msg))}
	}
	bad := func(why string) error { return badReply(w.clientID, "download-file", why) }
	var small struct{ Error, Path, Filename, MIMEType json.RawMessage }
	var data field
	err = scanObject(msg, func(f field) bool {
		var dst *json.RawMessage
		switch f.key {
		case "error":
			dst = &small.Error
		case "path":
			dst = &small.Path
		case "filename":
			dst = &small.Filename
		case "mimeType":
			dst = &small.MIMEType
		case "fileData":
			data = f
		}
		if dst != nil && f.n <= 64<<10 {
			*dst = msg.copyOf(f.off, f.n)
		}
		return true
	})
	if err != nil {
		return nil, bad(err.Error())
	}
	if text, failed := (moduleReply{"error": small.Error}).errorText(); failed && small.Error != nil {
		return nil, moduleError(text)
	}
	var out struct{ path, name, mime string }
	for _, v := range []struct {
		raw json.RawMessage
		dst *string
	}{{small.Path, &out.path}, {small.Filename, &out.name}, {small.MIMEType, &out.mime}} {
		if v.raw != nil && json.Unmarshal(v.raw, v.dst) != nil {
			return nil, bad("unexpected fields")
		}
	}
	body, size, err := dataURLBody(msg, data)
	if err != nil {
		return nil, bad(err.Error())
	}
	if out.path == "" {
		out.path = path
	}
	if out.mime == "" {
		out.mime = "application/octet-stream"
	}
	return &world.FileContent{Path: out.path, Name: out.name, MIMEType: out.mime, Size: size, Body: io.NopCloser(body)}, nil
}

// errDataURL says what is wrong with a download's fileData.
type errDataURL string

func (e errDataURL) Error() string { return string(e) }

// dataURLBody returns a reader decoding the base64 data URL that f (a
// field of msg) holds, and the decoded size. The base64 text is checked
// first, so that a bad reply fails before the caller gets anything.
func dataURLBody(msg *chunks, f field) (io.Reader, int64, error) {
	if !f.isString {
		return nil, 0, errDataURL("fileData is not a data URL")
	}
	start, n := f.off+1, f.n-2 // inside the quotes
	if f.escaped {
		// A JSON encoder that escapes (a `\/`): decode the string, at
		// the cost of a copy.
		var s string
		if json.Unmarshal(msg.copyOf(f.off, f.n), &s) != nil {
			return nil, 0, errDataURL("fileData is not a string")
		}
		msg = &chunks{bufs: [][]byte{[]byte(s)}, n: int64(len(s))}
		start, n = 0, int64(len(s))
	}
	head := msg.copyOf(start, min(n, 256))
	comma := strings.IndexByte(string(head), ',')
	if !strings.HasPrefix(string(head), "data:") || comma < 0 {
		return nil, 0, errDataURL("fileData is not a data URL")
	}
	start, n = start+int64(comma)+1, n-int64(comma)-1
	size, ok := base64Size(msg.section(start, n))
	if !ok {
		return nil, 0, errDataURL("fileData is not base64")
	}
	return base64.NewDecoder(base64.StdEncoding, msg.reader(start, n)), size, nil
}

// base64Alphabet marks the bytes of standard base64.
var base64Alphabet = func() (t [256]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = true
	}
	return t
}()

// base64Size checks padded standard base64 held in parts and returns the
// size it decodes to.
func base64Size(parts [][]byte) (int64, bool) {
	var n, pad int64
	for _, p := range parts {
		for _, c := range p {
			switch {
			case c == '=':
				pad++
			case pad > 0 || !base64Alphabet[c]:
				return 0, false
			}
		}
		n += int64(len(p))
	}
	if n%4 != 0 || pad > 2 {
		return 0, false
	}
	return n/4*3 - pad, true
}
