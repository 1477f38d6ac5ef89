package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The committed reference must be what the settings list generates: a setting added, renamed
// or redescribed without `make docs` fails here.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	var want bytes.Buffer
	if err := WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", ReferencePath))
	if err != nil {
		t.Fatalf("%s: %v (run `make docs`)", ReferencePath, err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s differs from what internal/config/settings.go generates: run `make docs` and commit it\nfirst difference: %s",
			ReferencePath, firstDifference(string(got), want.String()))
	}
}

// Every setting and every older name appears in the reference, each once as a row.
func TestConfigurationReferenceListsEverySetting(t *testing.T) {
	var ref bytes.Buffer
	if err := WriteReference(&ref); err != nil {
		t.Fatal(err)
	}
	var c Config
	for _, s := range c.settings() {
		if n := strings.Count(ref.String(), "\n| `"+s.env+"` |"); n != 1 {
			t.Errorf("%s: %d rows, want 1", s.env, n)
		}
	}
	for _, alias := range aliasNames() {
		if !strings.Contains(ref.String(), alias) {
			t.Errorf("older name %s is not in the reference", alias)
		}
	}
	for _, want := range []string{"`2000` (`2s`)", "`-temporal-namespace` or `-namespace`", "or the first argument"} {
		if !strings.Contains(ref.String(), want) {
			t.Errorf("reference lacks %q", want)
		}
	}
}

// firstDifference is the first line where got and want differ, both shown.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  committed: " + gl + "\n  generated: " + wl
		}
	}
	return "none (line endings?)"
}
