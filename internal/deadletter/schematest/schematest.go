// Package schematest checks dead-letter envelope bodies against the published JSON Schema,
// docs/envelope.schema.json, for the tests of the packages that write envelopes and the e2e
// tests that read them.
package schematest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Path is the schema's file in this checkout.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "envelope.schema.json")
}

// schema compiles the schema once, with format assertions on (date-time, uuid), which draft
// 2020-12 leaves off by default.
var schema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	raw, err := os.ReadFile(Path())
	if err != nil {
		return nil, fmt.Errorf("read envelope schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse envelope schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("envelope.schema.json", doc); err != nil {
		return nil, fmt.Errorf("load envelope schema: %w", err)
	}
	s, err := c.Compile("envelope.schema.json")
	if err != nil {
		return nil, fmt.Errorf("compile envelope schema: %w", err)
	}
	return s, nil
})

// Validate says whether body, an envelope as published, conforms to the schema; the error
// names each violation and where.
func Validate(body []byte) error {
	s, err := schema()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("envelope is not JSON: %w", err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("envelope does not match %s: %w", filepath.Base(Path()), err)
	}
	return nil
}
