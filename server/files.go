package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	relayv1 "relay/gen/go/relay/v1"
	"relay/world"
	"relay/world/files"
)

// DefaultMaxUploadBytes is the upload size limit when none is configured.
const DefaultMaxUploadBytes = 64 << 20

// downloadChunkBytes is the size of the chunks a download is sent in: well
// under the gRPC message limit, large enough to keep per-message costs low.
const downloadChunkBytes = 256 << 10

// fileService implements relayv1.FileServiceServer over each world's file
// area, `<dataDir>/worlds/<clientId>/files`. The FILES_BROWSE and
// FILES_UPLOAD permissions are checked by the policy interceptor before a
// handler runs.
type fileService struct {
	relayv1.UnimplementedFileServiceServer
	dataDir   string
	maxUpload int64
}

// newFileService returns the file service over the worlds kept in dataDir;
// maxUpload bounds an uploaded file (DefaultMaxUploadBytes when 0).
func newFileService(dataDir string, maxUpload int64) fileService {
	if maxUpload <= 0 {
		maxUpload = DefaultMaxUploadBytes
	}
	return fileService{dataDir: dataDir, maxUpload: maxUpload}
}

// area returns the file area of the call's world.
func (s fileService) area(call *Call) (*files.Area, error) {
	return files.Of(s.dataDir, call.World.Info().ClientID)
}

func (s fileService) ListFiles(ctx context.Context, req *relayv1.ListFilesRequest) (*relayv1.ListFilesResponse, error) {
	area, err := s.area(CallFrom(ctx))
	if err != nil {
		return nil, err
	}
	dir, entries, err := area.List(ctx, req.GetPath(), req.GetRecursive(), int(req.GetDepth()))
	if err != nil {
		return nil, err
	}
	out := &relayv1.ListFilesResponse{Path: dir, Recursive: req.GetRecursive(), Results: make([]*relayv1.FileEntry, 0, len(entries))}
	for _, e := range entries {
		out.Results = append(out.Results, &relayv1.FileEntry{
			Name:     e.Name,
			Path:     e.Path,
			Type:     e.Type,
			Size:     float64(e.Size),
			Modified: e.Modified.Format(time.RFC3339),
		})
	}
	return out, nil
}

func (s fileService) DownloadFile(req *relayv1.DownloadFileRequest, stream grpc.ServerStreamingServer[relayv1.DownloadFileResponse]) error {
	if req.GetPath() == "" {
		return world.Errorf(world.ErrInvalid, "'path' is required")
	}
	area, err := s.area(CallFrom(stream.Context()))
	if err != nil {
		return err
	}
	f, err := area.Open(req.GetPath())
	if err != nil {
		return err
	}
	defer f.Close()
	msg := &relayv1.DownloadFileResponse{Path: f.Path, Filename: f.Name, MimeType: f.MIMEType, Size: float64(f.Size)}
	buf := make([]byte, downloadChunkBytes)
	var sent int64
	for {
		n, rerr := io.ReadFull(f, buf)
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
	if first.GetFilename() == "" {
		return world.Errorf(world.ErrInvalid, "'filename' is required")
	}
	area, err := s.area(CallFrom(stream.Context()))
	if err != nil {
		return err
	}
	body := &uploadReader{stream: stream, pending: first.GetChunk()}
	w, err := area.Write(stream.Context(), first.GetPath(), first.GetFilename(), body, files.WriteOptions{
		Overwrite: first.GetOverwrite(),
		MaxBytes:  s.maxUpload,
	})
	if err != nil {
		return err
	}
	return stream.SendAndClose(&relayv1.UploadFileResponse{Path: w.Path, Size: float64(w.Size)})
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
