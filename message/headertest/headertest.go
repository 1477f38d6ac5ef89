// Package headertest generates AMQP header tables from fuzz input, for the fuzz tests of the
// packages that carry headers (message, bridge).
package headertest

import (
	"encoding/binary"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Gen turns fuzz bytes into header tables of every field type amqp091 can hand a consumer,
// and a few it cannot (NaN, infinities, nesting deeper than a client reads).
type Gen struct {
	// B is the input left; an exhausted input reads as zeros.
	B []byte
	// Names are header names to pick as keys besides names read from the input.
	Names []string
	// UTF8 keeps strings and names valid UTF-8, as JSON carries them unchanged.
	UTF8 bool
}

func (g *Gen) next() byte {
	if len(g.B) == 0 {
		return 0
	}
	c := g.B[0]
	g.B = g.B[1:]
	return c
}

func (g *Gen) bytes(n int) []byte {
	n = min(n, len(g.B))
	out := g.B[:n]
	g.B = g.B[n:]
	return out
}

func (g *Gen) u64() uint64 {
	var buf [8]byte
	copy(buf[:], g.bytes(8))
	return binary.LittleEndian.Uint64(buf[:])
}

func (g *Gen) str() string {
	s := string(g.bytes(int(g.next()) % 48))
	if g.UTF8 {
		s = strings.ToValidUTF8(s, "?")
	}
	return s
}

// Table is a table at depth (0 for the headers themselves) of up to 7 entries.
func (g *Gen) Table(depth int) amqp.Table {
	t := amqp.Table{}
	for n := int(g.next() % 8); n > 0 && len(g.B) > 0; n-- {
		var k string
		if c := g.next(); int(c) < 2*len(g.Names) && c%2 == 0 {
			k = g.Names[int(c)/2]
		} else {
			k = g.str()
		}
		t[k] = g.Value(depth + 1)
	}
	return t
}

// Value is one field value at depth.
func (g *Gen) Value(depth int) any {
	switch g.next() % 18 {
	case 0:
		return nil
	case 1:
		return g.str()
	case 2:
		return g.bytes(int(g.next()) % 32)
	case 3:
		return int8(g.next())
	case 4:
		return int16(g.u64())
	case 5:
		return int32(g.u64())
	case 6:
		return int64(g.u64())
	case 7:
		return uint8(g.next())
	case 8:
		return uint16(g.u64())
	case 9:
		return uint32(g.u64())
	case 10:
		return math.Float32frombits(uint32(g.u64()))
	case 11:
		return math.Float64frombits(g.u64())
	case 12:
		return g.next()%2 == 0
	case 13:
		return time.Unix(int64(g.u64()%(1<<40)), 0)
	case 14:
		return amqp.Decimal{Scale: g.next(), Value: int32(g.u64())}
	case 15:
		if depth > 40 {
			return "deep"
		}
		return g.Table(depth)
	case 16:
		if depth > 40 {
			return nil
		}
		a := []any{}
		for n := int(g.next() % 4); n > 0; n-- {
			a = append(a, g.Value(depth+1))
		}
		return a
	default:
		// A well-formed x-death entry list with a queue from the input.
		return []any{amqp.Table{"queue": g.str(), "exchange": g.str(), "routing-keys": []any{g.str()}, "count": int64(g.next())}}
	}
}
