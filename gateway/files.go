package gateway

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/wire"
)

// The file transfer RPCs, whose REST handlers (below) read and write the
// HTTP bodies themselves instead of going through the generic JSON path.
const (
	downloadMethod = "/relay.v1.FileService/DownloadFile"
	uploadMethod   = "/relay.v1.FileService/UploadFile"
)

// Upload and download tuning.
const (
	// fileChunkBytes is the size of the chunks sent to the upload RPC.
	fileChunkBytes = 256 << 10
	// chunkOverhead is what a chunk's message adds to its bytes (the
	// field's tag and length).
	chunkOverhead = 16
	// defaultMaxUpload is the upload limit assumed when none is configured
	// (the server's own default).
	defaultMaxUpload = 64 << 20
	// maxFormField bounds one text field of a multipart upload.
	maxFormField = 64 << 10
	// maxFormParts bounds the parts of a multipart upload.
	maxFormParts = 64
	// uploadSlack is what an upload body may hold beyond the file itself
	// (multipart framing and fields, JSON keys).
	uploadSlack = 1 << 20
)

// uploadFields are the request parameters a multipart form may carry.
var uploadFields = map[string]bool{"clientId": true, "userId": true, "path": true, "filename": true, "overwrite": true, "mimeType": true}

// isFileTransfer reports whether a route is served by the handlers of this
// file, which read the request themselves.
func isFileTransfer(rt *route) bool {
	return rt.fullMethod == downloadMethod || rt.fullMethod == uploadMethod
}

// serveFile serves a file transfer route: `GET /download` or `POST
// /upload`.
func (g *gateway) serveFile(w http.ResponseWriter, r *http.Request, rt *route) {
	if rt.fullMethod == downloadMethod {
		g.serveDownload(w, r)
		return
	}
	g.serveUpload(w, r, g.maxUpload)
}

// withKey forwards the caller's API key, and an upload's idempotency key,
// to the gRPC call.
func withKey(ctx context.Context, r *http.Request) context.Context {
	if key := r.Header.Get(wire.APIKeyHeader); key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, key)
	}
	for _, v := range r.Header[idempotencyKeyHeaderKey] {
		if !printableASCII(v) {
			// Metadata cannot carry it: the server's chain refuses the
			// call, in its turn, as an unreadable parameter.
			ctx = metadata.AppendToOutgoingContext(ctx, wire.InvalidParamsHeader, "Invalid Idempotency-Key: it must be printable ASCII characters only")
			continue
		}
		ctx = metadata.AppendToOutgoingContext(ctx, wire.IdempotencyKeyHeader, v)
	}
	return ctx
}

// callRequestID is the request id the server issued for a call, or a fresh
// one when the call failed before the server issued one.
func (g *gateway) callRequestID(op string, mds ...metadata.MD) string {
	for _, md := range mds {
		if id := firstValue(md, wire.RequestIDHeader); id != "" {
			return id
		}
	}
	return g.newRequestID(op)
}

// serveDownload streams a file: the raw bytes with Content-Type,
// Content-Length and Content-Disposition, or with `format=base64` a JSON
// envelope whose `data.fileData` is a base64 data URL. Either way the file
// flows through in chunks and is never held whole in memory. A failure
// before the first byte (key, scope, permission, bad path, missing file) is
// the usual error body with its status; one after it (the file changed or
// the caller went away) can only cut the response short, which the caller
// sees as a body shorter than Content-Length.
func (g *gateway) serveDownload(w http.ResponseWriter, r *http.Request) {
	rt := g.routes.byRPC[downloadMethod]
	op := rt.operation
	merged, err := mergeParams(rt.input, nil, r.URL.Query())
	req := &relayv1.DownloadFileRequest{}
	if err == nil {
		err = unmarshalParams(merged, req)
	}
	if err == nil && req.GetFormat() != "" && req.GetFormat() != "raw" && req.GetFormat() != "base64" {
		err = paramErrorf("'format' must be raw or base64")
	}
	ctx := r.Context()
	if err != nil {
		// The server answers the error after its key, world and user
		// checks (see deferParamError).
		var fields map[string]json.RawMessage
		fields, ctx = deferParamError(ctx, err.Error(), nil, r.URL.Query())
		req = &relayv1.DownloadFileRequest{}
		if err := unmarshalParams(appendObject(nil, fields), req); err != nil {
			g.writeError(w, http.StatusBadRequest, op, g.newRequestID(op), err.Error())
			return
		}
	}
	ctx, cancel := context.WithCancel(withInvalidParams(withKey(ctx, r)))
	defer cancel()
	var header metadata.MD
	stream, err := relayv1.NewFileServiceClient(g.conn).DownloadFile(ctx, req, grpc.Header(&header))
	var first *relayv1.DownloadFileResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil {
		var trailer metadata.MD
		if stream != nil {
			trailer = stream.Trailer()
		}
		st := status.Convert(err)
		g.writeStatus(w, st, op, g.callRequestID(op, header, trailer))
		return
	}
	requestID := g.callRequestID(op, header)
	next := func() ([]byte, error) {
		msg, err := stream.Recv()
		return msg.GetChunk(), err
	}
	if req.GetFormat() == "base64" {
		writeBase64Download(w, op, requestID, first, next)
		return
	}
	h := w.Header()
	h.Set("Content-Type", first.GetMimeType())
	h.Set("Content-Length", strconv.FormatInt(int64(first.GetSize()), 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": first.GetFilename()}))
	// Served from the API's origin, a file (an SVG, say) must never run as
	// a page there.
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set(wire.RequestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)
	chunk := first.GetChunk()
	for {
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				return // the caller went away
			}
		}
		var err error
		if chunk, err = next(); err != nil {
			if !errors.Is(err, io.EOF) {
				// Too late for a status: cut the response short.
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}

// writeBase64Download writes a download as the JSON envelope
// `{type, requestId, data: {path, filename, mimeType, size, fileData}}`,
// encoding the chunks as they arrive.
func writeBase64Download(w http.ResponseWriter, op, requestID string, first *relayv1.DownloadFileResponse, next func() ([]byte, error)) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(wire.RequestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	prefix := make([]byte, 0, 256)
	prefix = append(prefix, typeMember...)
	prefix = appendString(prefix, op+wire.ResultSuffix)
	prefix = append(prefix, requestIDMember...)
	prefix = appendString(prefix, requestID)
	prefix = append(prefix, dataMember+`{"path":`...)
	prefix = appendString(prefix, first.GetPath())
	prefix = append(prefix, `,"filename":`...)
	prefix = appendString(prefix, first.GetFilename())
	prefix = append(prefix, `,"mimeType":`...)
	prefix = appendString(prefix, first.GetMimeType())
	prefix = append(prefix, `,"size":`...)
	prefix = strconv.AppendInt(prefix, int64(first.GetSize()), 10)
	prefix = append(prefix, `,"fileData":`...)
	// A data URL's media type has no spaces: `text/markdown;charset=utf-8`.
	url := appendString(nil, "data:"+strings.ReplaceAll(first.GetMimeType(), " ", "")+";base64,")
	prefix = append(prefix, url[:len(url)-1]...) // the string goes on with the data
	if _, err := bw.Write(prefix); err != nil {
		return
	}
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	chunk := first.GetChunk()
	for {
		if _, err := enc.Write(chunk); err != nil {
			return
		}
		var err error
		if chunk, err = next(); err != nil {
			if !errors.Is(err, io.EOF) {
				panic(http.ErrAbortHandler)
			}
			break
		}
	}
	if enc.Close() != nil {
		return
	}
	if _, err := bw.WriteString(`"}}`); err != nil {
		return
	}
	_ = bw.Flush()
}

// unmarshalParams reads a request message from merged JSON parameters.
func unmarshalParams(merged []byte, req proto.Message) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(merged, req); err != nil {
		return paramErrorf("Invalid parameters: %v", err)
	}
	return nil
}

// serveUpload writes a file through the client-streaming upload RPC. The
// body is either multipart form data, whose file part is streamed to the
// RPC as it arrives (never buffered whole), or a JSON object whose
// `fileData` is a data URL or plain base64 (buffered, so bounded by the
// upload limit's base64 size). The parameters (path, filename, overwrite,
// mimeType, clientId, userId) come from the query string, from form fields
// placed before the file part, or from the JSON object; the body wins.
func (g *gateway) serveUpload(w http.ResponseWriter, r *http.Request, maxUpload int64) {
	op := g.routes.byRPC[uploadMethod].operation
	ctx, cancel := context.WithCancel(withKey(r.Context(), r))
	defer cancel()
	var (
		resp *relayv1.UploadFileResponse
		md   []metadata.MD
		err  error
	)
	if ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "multipart/form-data" {
		body := http.MaxBytesReader(w, r.Body, maxUpload+uploadSlack)
		resp, md, err = g.uploadMultipart(ctx, cancel, multipart.NewReader(body, params["boundary"]), r.URL.Query())
	} else {
		resp, md, err = g.uploadJSON(ctx, cancel, w, r, maxUpload)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			err = withHTTPStatus(http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes", tooLarge.Limit))
		case errors.As(err, new(*paramError)):
			err = withHTTPStatus(http.StatusBadRequest, err.Error())
		}
		var he *httpError
		if errors.As(err, &he) {
			g.writeError(w, he.code, op, g.callRequestID(op, md...), he.msg)
			return
		}
		st := status.Convert(err)
		g.writeStatus(w, st, op, g.callRequestID(op, md...))
		return
	}
	requestID := g.callRequestID(op, md...)
	envelopeID := requestID
	for _, m := range md {
		// An upload answered again for its idempotency key: the first
		// request's answer, envelope and all.
		if first := firstValue(m, wire.IdempotentReplayHeader); first != "" {
			envelopeID = first
			w.Header().Set(wire.IdempotentReplayHeader, first)
			break
		}
	}
	out, err := newJSONMarshaler().Marshal(&envelope{Type: op + wire.ResultSuffix, RequestID: envelopeID, Data: resp})
	if err != nil {
		g.writeError(w, http.StatusInternalServerError, op, requestID, "Internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(wire.RequestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// httpError is a failure the gateway itself answers, with its status.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func withHTTPStatus(code int, msg string) error { return &httpError{code: code, msg: msg} }

// uploadMultipart streams the file part of a multipart form to the upload
// RPC. Text fields before the file part are parameters; after it, only
// the end of the form may follow (cancel aborts the RPC otherwise, so the
// server keeps nothing).
func (g *gateway) uploadMultipart(ctx context.Context, cancel context.CancelFunc, mr *multipart.Reader, query url.Values) (*relayv1.UploadFileResponse, []metadata.MD, error) {
	values := url.Values{}
	for k, v := range query {
		values[k] = v
	}
	for parts := 0; ; parts++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return g.refuseUpload(ctx, cancel, paramErrorf("Missing file: send it as a form part with a file name (for example field 'file')"), nil, values)
		}
		if err != nil {
			return nil, nil, readError(err, "Could not read the multipart form")
		}
		if parts >= maxFormParts {
			return nil, nil, withHTTPStatus(http.StatusBadRequest, "Too many form parts")
		}
		name := part.FormName()
		if part.FileName() == "" && name != "file" && name != "upload" {
			text, err := io.ReadAll(io.LimitReader(part, maxFormField+1))
			if err != nil {
				return nil, nil, readError(err, "Could not read the multipart form")
			}
			if len(text) > maxFormField {
				return nil, nil, withHTTPStatus(http.StatusBadRequest, fmt.Sprintf("Form field '%s' is too long", name))
			}
			if uploadFields[name] {
				values.Set(name, string(text))
			}
			continue
		}
		meta, err := uploadParams(nil, values)
		if err != nil {
			return g.refuseUpload(ctx, cancel, err, nil, values)
		}
		if meta.Filename == "" {
			meta.Filename = part.FileName()
		}
		if meta.MimeType == "" {
			meta.MimeType = part.Header.Get("Content-Type")
		}
		// After the file, only the end of the form may come.
		rest := func() error {
			next, err := mr.NextPart()
			switch {
			case errors.Is(err, io.EOF):
				return nil
			case err != nil:
				return readError(err, "Could not read the multipart form")
			case next.FileName() != "":
				return withHTTPStatus(http.StatusBadRequest, "Only one file can be uploaded at a time")
			}
			return withHTTPStatus(http.StatusBadRequest, fmt.Sprintf("Form field '%s' must come before the file", next.FormName()))
		}
		return g.upload(ctx, cancel, meta, part, rest)
	}
}

// uploadJSON uploads the `fileData` of a JSON body, decoding the data URL
// or plain base64 as it arrives: the file is never held whole in memory.
// The other members are parameters. When the file's name came before
// `fileData`, the bytes go straight to the upload RPC (and a parameter that
// would change the destination may no longer follow); otherwise, since the
// destination is not known yet, they are spooled to a temporary file (see
// Options.SpoolDir) and sent once the object has been read. Members the
// upload does not know are skipped, each bounded in size.
func (g *gateway) uploadJSON(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request, maxUpload int64) (*relayv1.UploadFileResponse, []metadata.MD, error) {
	limit := int64(base64.StdEncoding.EncodedLen(int(maxUpload))) + uploadSlack
	query := r.URL.Query()
	fields := map[string]json.RawMessage{}
	refuse := func(err error) (*relayv1.UploadFileResponse, []metadata.MD, error) {
		return g.refuseUpload(ctx, cancel, err, appendObject(nil, fields), query)
	}
	meta := func() (*relayv1.UploadFileRequest, error) {
		return uploadParams(appendObject(nil, fields), query)
	}
	obj, isObject, err := newObjectStream(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return refuse(err)
	}
	var (
		spool    *os.File // the spooled file, when fileData came too early
		mimeType string   // a data URL's media type
	)
	defer func() {
		if spool != nil {
			spool.Close()
			os.Remove(spool.Name())
		}
	}()
	for isObject {
		name, done, err := obj.next()
		if err != nil {
			return refuse(err)
		}
		if done {
			break
		}
		if name != "fileData" || spool != nil {
			raw, err := obj.rawValue(maxFormField)
			switch {
			case errors.Is(err, errTooLong):
				return refuse(paramErrorf("Parameter '%s' is too long", name))
			case err != nil:
				return refuse(err)
			case name == "fileData":
				return refuse(paramErrorf("'fileData' appears twice"))
			case uploadFields[name]:
				fields[name] = raw
			}
			continue
		}
		data, null, err := obj.stringValue()
		if errors.Is(err, errNotString) {
			return refuse(paramErrorf("'fileData' must be a string"))
		}
		if err != nil {
			return refuse(err)
		}
		if null {
			continue
		}
		payload, dataType, err := fileDataPayload(data)
		if err != nil {
			return refuse(err)
		}
		mimeType = dataType
		if _, named := fields["filename"]; !named {
			if spool, err = g.spoolUpload(ctx, payload, maxUpload); err != nil {
				return refuse(err)
			}
			continue
		}
		m, err := meta()
		if err != nil {
			return refuse(err)
		}
		if m.MimeType == "" {
			m.MimeType = mimeType
		}
		// After the file, the object may only end or hold members the
		// upload ignores.
		rest := func() error {
			for {
				name, done, err := obj.next()
				if err != nil {
					return readError(err, "Could not read the request body")
				}
				if done {
					return nil
				}
				if name == "fileData" || uploadFields[name] {
					return withHTTPStatus(http.StatusBadRequest, fmt.Sprintf("Parameter '%s' must come before 'fileData' when 'filename' does (or go in the query string)", name))
				}
				if _, err := obj.rawValue(maxFormField); err != nil {
					return readError(err, "Could not read the request body")
				}
			}
		}
		return g.upload(ctx, cancel, m, payload, rest)
	}
	if spool == nil {
		return refuse(paramErrorf("Missing file data: send 'fileData' (a data URL or base64) or a multipart form"))
	}
	m, err := meta()
	if err != nil {
		return refuse(err)
	}
	if m.MimeType == "" {
		m.MimeType = mimeType
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	return g.upload(ctx, cancel, m, spool, nil)
}

// spoolUpload copies a file's bytes into a new temporary file, stopping
// with the upload limit's 413 past maxUpload bytes.
func (g *gateway) spoolUpload(ctx context.Context, payload io.Reader, maxUpload int64) (*os.File, error) {
	f, err := os.CreateTemp(g.spoolDir, "upload-*")
	if err != nil {
		return nil, withHTTPStatus(http.StatusInternalServerError, "Could not store the upload")
	}
	n, err := io.Copy(f, io.LimitReader(payload, maxUpload+1))
	if err == nil && n > maxUpload {
		err = withHTTPStatus(http.StatusRequestEntityTooLarge, fmt.Sprintf("File too large: the upload limit is %d bytes", maxUpload))
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// refuseUpload answers an upload whose parameters are wrong (a paramError):
// the server answers it after its key, world and user checks (see
// deferParamError), from the routing parameters found in params (a JSON
// object) or the query. Other errors are answered as they are.
func (g *gateway) refuseUpload(ctx context.Context, cancel context.CancelFunc, err error, params []byte, query url.Values) (*relayv1.UploadFileResponse, []metadata.MD, error) {
	var pe *paramError
	if !errors.As(err, &pe) {
		return nil, nil, readError(err, "Could not read the request body")
	}
	routing, ctx := deferParamError(ctx, err.Error(), params, query)
	meta := &relayv1.UploadFileRequest{}
	if err := unmarshalParams(appendObject(nil, routing), meta); err != nil {
		return nil, nil, err
	}
	return g.upload(withInvalidParams(ctx), cancel, meta, eofReader{}, nil)
}

// eofReader is an empty body.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// fileDataPayload turns the stream of a `fileData` string into the stream of
// the file's bytes: a data URL (`data:<type>;base64,<data>`, whose type it
// returns) or plain base64.
func fileDataPayload(data io.Reader) (io.Reader, string, error) {
	br := bufio.NewReaderSize(data, 4096)
	var mimeType string
	if prefix, _ := br.Peek(5); string(prefix) == "data:" {
		header, err := br.ReadSlice(',')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) || errors.Is(err, io.EOF) {
				return nil, "", paramErrorf("Invalid file data format: must be a data URL with base64 content")
			}
			return nil, "", err
		}
		mediaType, isBase64 := strings.CutSuffix(string(header[len("data:"):len(header)-1]), ";base64")
		if !isBase64 {
			return nil, "", paramErrorf("Invalid file data format: must be a data URL with base64 content")
		}
		mimeType = mediaType
	}
	return base64Stream{base64.NewDecoder(base64.StdEncoding, br)}, mimeType, nil
}

// base64Stream reports corrupt base64 as the caller's error (400).
type base64Stream struct{ r io.Reader }

func (b base64Stream) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var corrupt base64.CorruptInputError
	if errors.As(err, &corrupt) {
		err = withHTTPStatus(http.StatusBadRequest, fmt.Sprintf("Invalid base64 data in 'fileData' at byte %d", int64(corrupt)))
	}
	return n, err
}

// uploadParams builds the upload's first message from its parameters: the
// members of a JSON object (body, nil for none) merged with text values.
func uploadParams(body []byte, values url.Values) (*relayv1.UploadFileRequest, error) {
	md := (&relayv1.UploadFileRequest{}).ProtoReflect().Descriptor()
	merged, err := mergeParams(md, body, values)
	if err != nil {
		return nil, err
	}
	meta := &relayv1.UploadFileRequest{}
	if err := unmarshalParams(merged, meta); err != nil {
		return nil, err
	}
	meta.Chunk = nil
	return meta, nil
}

// upload runs the upload RPC: meta first, then body in chunks. When the
// server ends the call early (a refused permission, the size limit), the
// rest of the body is left unread and the server's status returned. after,
// when set, runs once the body is sent and may still refuse the upload:
// then cancel aborts the call and the server keeps nothing.
func (g *gateway) upload(ctx context.Context, cancel context.CancelFunc, meta *relayv1.UploadFileRequest, body io.Reader, after func() error) (*relayv1.UploadFileResponse, []metadata.MD, error) {
	var header metadata.MD
	stream, err := relayv1.NewFileServiceClient(g.conn).UploadFile(ctx, grpc.Header(&header))
	if err != nil {
		return nil, []metadata.MD{header}, err
	}
	mds := func() []metadata.MD { return []metadata.MD{header, stream.Trailer()} }
	sendErr := stream.Send(meta)
	for sendErr == nil {
		buf := make([]byte, g.chunkBytes()) // a message may be read after Send returns: never reuse
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			sendErr = stream.Send(&relayv1.UploadFileRequest{Chunk: buf[:n]})
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			abort(cancel, stream)
			return nil, mds(), readError(rerr, "Could not read the upload")
		}
	}
	if sendErr == nil && after != nil {
		if err := after(); err != nil {
			abort(cancel, stream)
			return nil, mds(), err
		}
	}
	// After a failed Send the server has ended the call: its status comes
	// with the answer.
	resp, err := stream.CloseAndRecv()
	return resp, mds(), err
}

// chunkBytes is the size of the chunks sent to the upload RPC:
// fileChunkBytes, or less when the request size limit (MaxBodyBytes, which
// the gRPC server applies to every message, upload chunks included) is
// smaller.
func (g *gateway) chunkBytes() int {
	return int(max(min(fileChunkBytes, g.maxBody-chunkOverhead), 1))
}

// abort ends an upload call so that the server keeps nothing: it cancels
// the call and waits for the stream to end, without CloseAndRecv, whose
// half-close could still reach the server before the cancellation and
// make it store the file.
func abort(cancel context.CancelFunc, stream grpc.ClientStream) {
	cancel()
	_ = stream.RecvMsg(new(relayv1.UploadFileResponse))
}

// readError turns an error reading the request body into the caller's
// error: 413 past the body limit, else 400.
func readError(err error, msg string) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	var he *httpError
	if errors.As(err, &he) {
		return err
	}
	if status.Code(err) == codes.Canceled {
		return err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		code, slow := bodyReadFailure(err)
		return withHTTPStatus(code, slow)
	}
	return withHTTPStatus(http.StatusBadRequest, msg)
}

// bodyReadFailure is the answer to a request body that could not be read:
// 408 when it came too slowly (the connection's read deadline passed: see
// package netlimit), else 400.
func bodyReadFailure(err error) (int, string) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return http.StatusRequestTimeout, "Request body arrived too slowly"
	}
	return http.StatusBadRequest, "Could not read the request body"
}
