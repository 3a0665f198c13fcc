package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/node"
)

// Build information that a release build sets with the linker, overriding
// what the Go toolchain recorded (see buildInfo):
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.commit=$(git rev-parse HEAD) -X main.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/relay
//
// Left empty, the values come from node.ReadBuildInfo: the module version
// of `go install github.com/tabletop-relay/relay/cmd/relay@v1.2.0`, and the
// commit and its time that `go build` records in a git checkout.
var (
	version string
	commit  string
	date    string
)

// buildInfo is what `relay --version` prints and `/healthz` reports.
func buildInfo() gateway.BuildInfo {
	info := node.ReadBuildInfo()
	if version != "" {
		info.Version = version
	}
	if commit != "" {
		info.Commit = commit
	}
	if date != "" {
		info.Date = date
	}
	return info
}

// printVersion writes one line: `relay <version> (commit <commit>, date
// <date>, <go version>)`, leaving out an unknown date and saying why the
// commit is unknown.
func printVersion(w io.Writer, info gateway.BuildInfo) {
	var details []string
	if info.Commit != "" {
		details = append(details, "commit "+info.Commit)
	} else {
		// Go records the commit in a clone unless GOFLAGS holds
		// -buildvcs=false; say so rather than leave it out silently.
		details = append(details, "commit unknown: built outside a git clone or with -buildvcs=false; make build records it")
	}
	if info.Date != "" {
		details = append(details, "date "+info.Date)
	}
	details = append(details, runtime.Version())
	fmt.Fprintf(w, "relay %s (%s)\n", info.Version, strings.Join(details, ", "))
}
