package files

import (
	"mime"
	"os"
	"path"
	"strings"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// File is an open file of the area. Read it as a stream; Close it when done.
type File struct {
	*os.File
	Path     string // relative to the area's root
	Name     string // the last path segment
	MIMEType string
	Size     int64
	Modified time.Time
}

// Open opens the file at p for reading. A directory is ErrInvalid, a
// missing file ErrNotFound.
func (a *Area) Open(p string) (*File, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if clean == "" {
		return nil, world.Errorf(world.ErrInvalid, "'path' must name a file")
	}
	root, err := a.open()
	if err != nil {
		return nil, err
	}
	// The open file stays usable after its root is closed.
	defer root.Close()
	f, err := root.Open(clean)
	if err != nil {
		return nil, fsError(err, clean)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsError(err, clean)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, world.Errorf(world.ErrInvalid, "Not a file: %s", clean)
	}
	name := path.Base(clean)
	return &File{File: f, Path: clean, Name: name, MIMEType: MIMEType(name), Size: info.Size(), Modified: info.ModTime().UTC()}, nil
}

// extraTypes are MIME types of extensions the platform's table may lack.
var extraTypes = map[string]string{
	".md":    "text/markdown; charset=utf-8",
	".json":  "application/json",
	".svg":   "image/svg+xml",
	".webp":  "image/webp",
	".webm":  "video/webm",
	".ogg":   "audio/ogg",
	".mp3":   "audio/mpeg",
	".txt":   "text/plain; charset=utf-8",
	".pdf":   "application/pdf",
	".png":   "image/png",
	".jpg":   "image/jpeg",
	".jpeg":  "image/jpeg",
	".gif":   "image/gif",
	".woff2": "font/woff2",
}

// MIMEType is the MIME type of a file name, from its extension;
// `application/octet-stream` when unknown.
func MIMEType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := extraTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}
