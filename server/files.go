package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// DefaultMaxUploadBytes is the upload size limit when none is configured.
const DefaultMaxUploadBytes = 64 << 20

// downloadChunkBytes is the size of the chunks a download is sent in: well
// under the gRPC message limit, large enough to keep per-message costs low.
const downloadChunkBytes = 256 << 10

// fileService implements relayv1.FileServiceServer over the worlds' file
// areas ([world.Files]). The FILES_BROWSE and FILES_UPLOAD permissions are
// checked by the policy interceptor before a handler runs.
type fileService struct {
	relayv1.UnimplementedFileServiceServer
	maxUpload int64
	// quotas and worlds, when set, bound the uploads of each account.
	quotas *quotaPolicy
	worlds EmbeddedWorlds
	// idempotency serves the uploads sent with an idempotency key; nil
	// ignores the key.
	idempotency *idempotency
}

// newFileService returns the file service; maxUpload bounds an uploaded
// file (DefaultMaxUploadBytes when 0).
func newFileService(maxUpload int64) fileService {
	if maxUpload <= 0 {
		maxUpload = DefaultMaxUploadBytes
	}
	return fileService{maxUpload: maxUpload}
}

func (fileService) ListFiles(ctx context.Context, req *relayv1.ListFilesRequest) (*relayv1.ListFilesResponse, error) {
	area, call, err := capability[world.Files](ctx)
	if err != nil {
		return nil, err
	}
	dir, entries, err := area.ListFiles(ctx, call.User, world.ListFilesParams{Path: req.GetPath(), Recursive: req.GetRecursive(), Depth: int(req.GetDepth())})
	if err != nil {
		return nil, err
	}
	out := &relayv1.ListFilesResponse{Path: dir, Recursive: req.GetRecursive(), Results: make([]*relayv1.FileEntry, 0, len(entries))}
	for _, e := range entries {
		// A world that does not know a file's time (a linked tabletop's
		// listing has none) sends an empty one rather than year 1.
		var modified string
		if !e.Modified.IsZero() {
			modified = e.Modified.Format(time.RFC3339)
		}
		out.Results = append(out.Results, &relayv1.FileEntry{
			Name:     e.Name,
			Path:     e.Path,
			Type:     e.Type,
			Size:     float64(e.Size),
			Modified: modified,
		})
	}
	return out, nil
}

func (fileService) DownloadFile(req *relayv1.DownloadFileRequest, stream grpc.ServerStreamingServer[relayv1.DownloadFileResponse]) error {
	ctx := stream.Context()
	area, call, err := capability[world.Files](ctx)
	if err != nil {
		return err
	}
	if req.GetPath() == "" {
		return world.Errorf(world.ErrInvalid, "'path' is required")
	}
	f, err := area.OpenFile(ctx, call.User, req.GetPath())
	if err != nil {
		return err
	}
	defer f.Body.Close()
	msg := &relayv1.DownloadFileResponse{Path: f.Path, Filename: f.Name, MimeType: f.MIMEType, Size: float64(f.Size)}
	var sent int64
	for {
		// Each chunk has a buffer of its own: a message must not change
		// once sent, and the in-process connection hands it over as it is.
		buf := make([]byte, downloadChunkBytes)
		n, rerr := io.ReadFull(f.Body, buf)
		if n > 0 || msg.Path != "" {
			msg.Chunk = buf[:n]
			if err := stream.Send(msg); err != nil {
				return err
			}
			sent += int64(n)
			msg = &relayv1.DownloadFileResponse{}
		}
		switch {
		case rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF):
			if sent != f.Size {
				// The file changed while it was sent: the caller's copy is wrong.
				return world.Errorf(world.ErrUnavailable, "The file changed during the download: %s", f.Path)
			}
			return nil
		case rerr != nil:
			return world.Errorf(world.ErrUnavailable, "Could not read %s", f.Path)
		}
	}
}

func (s fileService) UploadFile(stream grpc.ClientStreamingServer[relayv1.UploadFileRequest, relayv1.UploadFileResponse]) error {
	// Receiving the first message also runs the world, user and permission
	// checks (see Chain).
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return world.Errorf(world.ErrInvalid, "The upload holds no message")
		}
		return err
	}
	area, call, err := capability[world.Files](stream.Context())
	if err != nil {
		return err
	}
	if first.GetFilename() == "" {
		return world.Errorf(world.ErrInvalid, "'filename' is required")
	}
	limit, quotaErr, err := s.uploadLimit(stream.Context(), call)
	if err != nil {
		return err
	}
	upload := func(body io.Reader) (*relayv1.UploadFileResponse, error) {
		w, err := area.WriteFile(stream.Context(), call.User, world.WriteFileParams{
			Dir:       first.GetPath(),
			Name:      first.GetFilename(),
			Overwrite: first.GetOverwrite(),
			MaxBytes:  limit,
		}, body)
		if err != nil {
			if quotaErr != nil && errors.Is(err, world.ErrTooLarge) {
				return nil, quotaErr
			}
			return nil, err
		}
		return &relayv1.UploadFileResponse{Path: w.Path, Size: float64(w.Size)}, nil
	}
	var resp *relayv1.UploadFileResponse
	if key, ok := s.idempotency.uploadKey(stream.Context(), call); ok {
		// A keyed upload (idempotency.go): the chunks after the first
		// are read through the ledger, which hashes them.
		resp, err = s.idempotency.serveUpload(stream.Context(), call, key, first, &uploadReader{stream: stream}, func(md metadata.MD) error {
			// In the trailer too, which the REST gateway reads as the
			// header of an upload.
			stream.SetTrailer(md)
			return stream.SetHeader(md)
		}, upload)
	} else {
		resp, err = upload(&uploadReader{stream: stream, pending: first.GetChunk()})
	}
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// uploadLimit is the largest file the call may upload: the relay's
// limit, or less when the account's quota of bytes a file, or what its
// quota of stored bytes leaves in an embedded world it owns, is smaller.
// quotaErr, when not nil, is the refusal to give instead of "too large"
// since the account's quota is what binds. An account with no room left
// is refused at once, naming the quota.
func (s fileService) uploadLimit(ctx context.Context, call *Call) (limit int64, quotaErr error, err error) {
	limit = s.maxUpload
	if s.quotas == nil {
		return limit, nil, nil
	}
	account := call.Key.Account()
	lim, err := s.quotas.limitsFor(ctx, account)
	if err != nil {
		return 0, nil, err
	}
	if lim.UploadBytes > 0 && lim.UploadBytes < limit {
		limit = lim.UploadBytes
		quotaErr = quotaReached("uploadBytes", lim.UploadBytes, "bytes a file")
	}
	if lim.StoredBytes > 0 && s.worlds != nil && s.worlds.Holds(ctx, call.World.Info().ClientID) {
		// Only an embedded world's files are kept by the relay.
		left := lim.StoredBytes - s.worlds.StoredBytes(ctx, account)
		if left <= 0 {
			return 0, nil, quotaReached("storedBytes", lim.StoredBytes, "bytes of embedded worlds; remove a world or files first")
		}
		if left < limit {
			limit = left
			quotaErr = quotaReached("storedBytes", lim.StoredBytes, "bytes of embedded worlds; remove a world or files first")
		}
	}
	return limit, quotaErr, nil
}

// uploadReader reads an upload's bytes from the chunks of its messages.
type uploadReader struct {
	stream  grpc.ClientStreamingServer[relayv1.UploadFileRequest, relayv1.UploadFileResponse]
	pending []byte
}

func (r *uploadReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err // io.EOF at the end of the upload
		}
		r.pending = msg.GetChunk()
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}
