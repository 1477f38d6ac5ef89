package visibility

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanLiteral reads one string literal at the start of q the way Temporal's SQL tokenizer does
// (its scanString): the opening quote is the delimiter; a backslash takes the next byte, decoded
// by MySQL's escape table (\0 \b \n \r \t \Z) or kept as it is; a doubled delimiter is one
// delimiter character; the first lone delimiter ends it. It returns the value and what follows.
func scanLiteral(t *testing.T, q string) (value, rest string) {
	t.Helper()
	require.NotEmpty(t, q)
	delim := q[0]
	require.Contains(t, `'"`, string(delim), "a literal opens with a quote: %s", q)
	decode := map[byte]byte{'0': 0, 'b': '\b', 'n': '\n', 'r': '\r', 't': '\t', 'Z': 26}
	var b strings.Builder
	for i := 1; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\\':
			i++
			require.Less(t, i, len(q), "the literal ends inside an escape: %s", q)
			if d, ok := decode[q[i]]; ok {
				b.WriteByte(d)
			} else {
				b.WriteByte(q[i])
			}
		case c == delim && i+1 < len(q) && q[i+1] == delim:
			b.WriteByte(c)
			i++
		case c == delim:
			return b.String(), q[i+1:]
		default:
			b.WriteByte(c)
		}
	}
	t.Fatalf("unterminated literal: %s", q)
	return "", ""
}

// hostile are values that break or inject into a query quoted the wrong way.
var hostile = []string{
	"", "orders", "it's", `a"b`, `a\b`, `\`, `'`, `''`, `\'`, `\\'`, `'\`,
	`x' OR RetryStatus != 'y`, `x') OR ('1'='1`, `\' OR 1=1 --`, `" OR ""="`,
	"line\nbreak", "tab\t", "nul\x00byte", "ctrl-z\x1a", `\n is not a line break`, `\0`, `\Z`,
	"ünïcödé ✓", "😀'😀", "\xff\xfe not UTF-8",
}

func TestLiteralReadsBackAsItself(t *testing.T) {
	for _, v := range hostile {
		lit := Literal(v)
		got, rest := scanLiteral(t, lit+" AND TaskQueue = 'tq'")
		assert.Equal(t, v, got, "%q → %s", v, lit)
		assert.Equal(t, " AND TaskQueue = 'tq'", rest, "%q → %s: the literal ends where it should", v, lit)
	}
}

func TestLiteralEscapes(t *testing.T) {
	for v, want := range map[string]string{
		"orders":                  `'orders'`,
		"it's":                    `'it\'s'`,
		`a\b`:                     `'a\\b'`,
		`a"b`:                     `'a"b'`,
		`x' OR RetryStatus != 'y`: `'x\' OR RetryStatus != \'y'`,
		`\' OR 1=1 --`:            `'\\\' OR 1=1 --'`,
		"line\nbreak":             "'line\nbreak'",
		"ünï":                     `'ünï'`,
	} {
		assert.Equal(t, want, Literal(v), "%q", v)
	}
}

func TestCheckMatchable(t *testing.T) {
	for _, v := range []string{"orders", "it's", "a''b", `x' OR RetryStatus != 'y`, "ünïcödé ✓", "orders.eu", "a\x01b"} {
		assert.NoError(t, CheckMatchable(v), "%q", v)
	}
	for _, v := range []string{`a"b`, `a\b`, "a\tb", "a\nb", "a\rb", "a\bb", "'lead", "trail'", "'"} {
		assert.ErrorIs(t, CheckMatchable(v), ErrUnmatchable, "%q", v)
	}
}

func FuzzLiteral(f *testing.F) {
	for _, v := range hostile {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, rest := scanLiteral(t, Literal(v)+")")
		if got != v || rest != ")" {
			t.Fatalf("%q → %s read back as %q, then %q", v, Literal(v), got, rest)
		}
		if utf8.ValidString(v) && !utf8.ValidString(Literal(v)) {
			t.Fatalf("%q → %s is not UTF-8", v, Literal(v))
		}
	})
}
