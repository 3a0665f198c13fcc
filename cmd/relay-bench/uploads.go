package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// uploadsConfig configures `relay-bench uploads`.
type uploadsConfig struct {
	relayBin   string
	concurrent int
	size       int64
}

func parseUploadsConfig(args []string, stderr io.Writer) (uploadsConfig, error) {
	fs := flag.NewFlagSet("relay-bench uploads", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg uploadsConfig
	fs.StringVar(&cfg.relayBin, "relay-bin", "", "relay `binary` to start instead of building ./cmd/relay with `go build`")
	fs.IntVar(&cfg.concurrent, "concurrent", 8, "`uploads` sent at once in each phase")
	fs.Int64Var(&cfg.size, "size", 64<<20, "`bytes` of each uploaded file: the relay's default upload limit")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: relay-bench uploads [flags]\n\nStarts a relay and measures its peak resident memory while it takes\nconcurrent uploads of the largest allowed size, one phase per kind of body:\nmultipart, JSON with the file name before the data (streamed), JSON with\nthe data first (spooled to disk), and bodies of that size sent without an\nAPI key (refused before they are read). The clients generate their bodies\nas they send them.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.concurrent < 1 || cfg.size < 1 {
		return cfg, errors.New("--concurrent and --size must be positive")
	}
	return cfg, nil
}

// runUploads runs the phases and prints the relay's peak memory in each.
func runUploads(ctx context.Context, cfg uploadsConfig, stdout, stderr io.Writer) error {
	t, err := startTarget(ctx, config{relayBin: cfg.relayBin}, stderr)
	if err != nil {
		return err
	}
	defer t.stop()
	client := &http.Client{Timeout: 10 * time.Minute}
	base := "http://" + t.addr
	idle, err := readProcStats(t.pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "relay peak RSS after start: %.1f MiB\n", float64(idle.peakRSS)/(1<<20))
	fmt.Fprintf(stdout, "%-34s %12s %10s %14s\n", "phase", "uploads", "seconds", "peak RSS MiB")
	phases := []struct {
		name string
		key  string
		body func(i int) (io.Reader, string)
		want int
	}{
		{"multipart", t.adminKey, func(i int) (io.Reader, string) { return multipartUpload(i, cfg.size) }, http.StatusOK},
		{"JSON, name first (streamed)", t.adminKey, func(i int) (io.Reader, string) { return jsonUpload(i, cfg.size, true) }, http.StatusOK},
		{"JSON, data first (spooled)", t.adminKey, func(i int) (io.Reader, string) { return jsonUpload(i, cfg.size, false) }, http.StatusOK},
		{"JSON without a key (refused)", "", func(i int) (io.Reader, string) { return jsonUpload(i, cfg.size, true) }, http.StatusUnauthorized},
	}
	for n, ph := range phases {
		// Writing 5 to clear_refs resets the process's peak RSS (Linux), so
		// each phase reports its own peak.
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", t.pid), []byte("5"), 0); err != nil {
			return fmt.Errorf("reset the relay's peak RSS: %w", err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, cfg.concurrent)
		for i := range cfg.concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, contentType := ph.body(n*1000 + i)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/upload?clientId=demo&path=bench&overwrite=true", body)
				if err != nil {
					errs[i] = err
					return
				}
				req.Header.Set("Content-Type", contentType)
				if ph.key != "" {
					req.Header.Set("X-Api-Key", ph.key)
				}
				resp, err := client.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				if resp.StatusCode != ph.want {
					errs[i] = fmt.Errorf("status %d, want %d: %s", resp.StatusCode, ph.want, msg)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		stats, err := readProcStats(t.pid)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-34s %12d %10.1f %14.1f\n", ph.name, cfg.concurrent, time.Since(start).Seconds(), float64(stats.peakRSS)/(1<<20))
	}
	fmt.Fprintf(stdout, "each upload: %d bytes\n", cfg.size)
	return nil
}

// multipartUpload is a multipart body holding a file of size zero bytes.
func multipartUpload(i int, size int64) (io.Reader, string) {
	head := fmt.Sprintf("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m%d.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n", i)
	return io.MultiReader(strings.NewReader(head), io.LimitReader(zeros{}, size), strings.NewReader("\r\n--b--\r\n")), "multipart/form-data; boundary=b"
}

// jsonUpload is a JSON body whose fileData is the base64 of size zero
// bytes, encoded as it is read; nameFirst puts the file name before it.
func jsonUpload(i int, size int64, nameFirst bool) (io.Reader, string) {
	pr, pw := io.Pipe()
	go func() {
		enc := base64.NewEncoder(base64.StdEncoding, pw)
		_, err := io.Copy(enc, io.LimitReader(zeros{}, size))
		if err == nil {
			err = enc.Close()
		}
		pw.CloseWithError(err)
	}()
	name := fmt.Sprintf(`"filename":"j%d.bin"`, i)
	if nameFirst {
		return io.MultiReader(strings.NewReader("{"+name+`,"fileData":"`), pr, strings.NewReader(`"}`)), "application/json"
	}
	return io.MultiReader(strings.NewReader(`{"fileData":"`), pr, strings.NewReader(`",`+name+"}")), "application/json"
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
