package message

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Errorf("Truncate(short) = %q", got)
	}
	s := strings.Repeat("日", 10) // 3 bytes each
	got := Truncate(s, 10)
	if len(got) > 10 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "日日") {
		t.Errorf("Truncate(%q, 10) = %q (%d bytes)", s, got, len(got))
	}
	if got := Truncate("abcdef", 2); got != "ab" { // the mark does not fit
		t.Errorf("Truncate(abcdef, 2) = %q", got)
	}
}

func TestWithLastError(t *testing.T) {
	e := Envelope{RetryAttempts: []Attempt{{ErrorType: "A", StackTrace: "a"}, {ErrorType: "B"}, {}}}
	if got := e.WithLastError(); got.ErrorType != "B" || got.StackTrace != "" {
		t.Errorf("WithLastError = %q %q, want B and no trace", got.ErrorType, got.StackTrace)
	}
	e.ErrorType = "set"
	if got := e.WithLastError(); got.ErrorType != "set" {
		t.Errorf("WithLastError overwrote %q", got.ErrorType)
	}
	if got := (Envelope{}).WithLastError(); got.ErrorType != "" {
		t.Errorf("empty envelope got %q", got.ErrorType)
	}
}
