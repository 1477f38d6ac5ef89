package visibility

import (
	"errors"
	"strings"
)

// Literal renders s as a string literal of the visibility query language: in single quotes,
// with each backslash and single quote escaped by a backslash. Temporal reads the query with a
// MySQL-dialect SQL tokenizer, in which a backslash inside a literal escapes the next character
// and every other byte stands for itself; so whatever s holds, the literal ends where it should
// and reads back as s. (Go's %q is not this grammar: it writes \n, \x00 and \u escapes that
// the tokenizer reads as other characters.)
func Literal(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('\'')
	return b.String()
}

// ErrUnmatchable is why CheckMatchable refuses a value.
var ErrUnmatchable = errors.New(`visibility cannot match a value holding ", \, a tab, a line break or a backspace, or starting or ending with '`)

// CheckMatchable refuses keyword values that Literal quotes safely but SQL visibility (the dev
// server's SQLite, PostgreSQL) does not match: after parsing, the server writes the value into
// its own SQL with ", \, tab, line breaks and backspace escaped by a backslash, which SQLite
// and PostgreSQL read as a literal backslash, and it trims every ' from the ends of a value.
// A filter on such a value would silently miss the items holding it; refusing it is better.
func CheckMatchable(v string) error {
	if strings.ContainsAny(v, "\"\\\t\n\r\b") || strings.HasPrefix(v, "'") || strings.HasSuffix(v, "'") {
		return ErrUnmatchable
	}
	return nil
}
