// Command openapi writes the relay's OpenAPI 3.0 document from the compiled
// contract: a buf image of proto/ with its comments (buf build), so that the
// document follows the protos and their documentation.
//
// The protos give the operations (google.api.http rules), their policies
// (relay.v1.policy: operation name, scope, GM-only, world permission), the
// messages and their comments, and which request fields are required
// (google.api.field_behavior REQUIRED). On top of them the document
// describes what the gateway adds on the wire: the `{type, requestId, data}`
// envelope and `{type, requestId, error}` failures, the JSON values that
// the google.protobuf.Value fields marked relay.v1.raw_json carry (typed
// in values.json), the event streams as Server-Sent Events with their
// events and payloads, the upload's multipart and JSON bodies, the download's raw and base64 forms,
// and the gateway's own public paths.
//
// scripts/generate.sh runs it:
//
//	buf build -o image.binpb
//	go run ./scripts/openapi -image image.binpb -out gen/openapi/relay.json
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	// The generated packages register the option extensions (relay.v1
	// policy and raw_json, google.api http and field_behavior), so that the
	// image's options decode into them.
	_ "github.com/tabletop-relay/relay/gen/go/relay/v1"
	_ "google.golang.org/genproto/googleapis/api/annotations"
)

//go:embed values.json
var valuesJSON []byte

//go:embed intro.md
var introMarkdown string

func main() {
	image := flag.String("image", "", "a buf image (binary) of the contract, with source info")
	out := flag.String("out", "", "where to write the OpenAPI document")
	flag.Parse()
	if *image == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: openapi -image image.binpb -out relay.json")
		os.Exit(2)
	}
	if err := run(*image, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(imagePath, outPath string) error {
	files, err := loadImage(imagePath)
	if err != nil {
		return err
	}
	values, err := loadValues(valuesJSON)
	if err != nil {
		return fmt.Errorf("values.json: %w", err)
	}
	doc, err := build(files, values)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, raw, "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	return os.WriteFile(outPath, pretty.Bytes(), 0o644)
}

// loadImage reads a buf image, which is wire-compatible with a
// FileDescriptorSet, into a registry of its files.
func loadImage(path string) (*protoregistry.Files, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return files, nil
}
