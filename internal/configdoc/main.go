// Command configdoc writes the configuration reference (docs/configuration-reference.md) from
// the settings list in internal/config/settings.go: `make docs`, or `go run ./internal/configdoc -o FILE`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

func main() {
	out := flag.String("o", config.ReferencePath, "file to write; - for standard output")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	var b bytes.Buffer
	if err := config.WriteReference(&b); err != nil {
		return fmt.Errorf("render the reference: %w", err)
	}
	if out == "-" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the reference: %w", err)
	}
	return nil
}
