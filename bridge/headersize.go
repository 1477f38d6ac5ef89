package bridge

import "unicode/utf8"

// MaxHeaderBytes bounds the AMQP encoding of the headers a report carries. A republish's
// content header (properties and headers) must fit in one AMQP frame, and RabbitMQ closes the
// connection on a larger one (frame_max, 128 KiB by default), so a message whose headers do not
// fit could never be republished: its every attempt would kill the publisher's connection. The
// limit leaves 4 KiB of the frame for the properties and x-retry-count / x-retry-key.
const MaxHeaderBytes = 128<<10 - 4<<10

// MaxHeaderEntries bounds the fields of the headers table and of any table or array in it: a
// consumer using amqp091-go closes its connection on a delivery with more (its
// maxContainerElements), so a republish carrying them could never be consumed.
const MaxHeaderEntries = 8192

// headersTooLarge refuses a report whose headers could not be republished: over one AMQP
// frame, or with more entries in a table or array than AMQP clients read.
func headersTooLarge(h map[string]any) *PoisonError {
	if path, n := largestContainer(h, "headers"); n > MaxHeaderEntries {
		return poisonf("%s hold %d entries, over the limit of %d that AMQP clients (amqp091-go) read", path, n, MaxHeaderEntries)
	}
	n := tableSize(h)
	if n <= MaxHeaderBytes {
		return nil
	}
	return poisonf("headers encode to %d bytes, over the limit of %d: the republish must fit in one AMQP frame (RabbitMQ's frame_max, 128 KiB by default)", n, MaxHeaderBytes)
}

// largestContainer finds the table or array with the most entries, and its path.
func largestContainer(v any, path string) (string, int) {
	best, bestN := path, 0
	visit := func(p string, n int) {
		if n > bestN {
			best, bestN = p, n
		}
	}
	switch x := v.(type) {
	case map[string]any:
		visit(path, len(x))
		for k, e := range x {
			if p, n := largestContainer(e, "header "+k); n > bestN {
				visit(p, n)
			}
		}
	case []any:
		visit(path, len(x))
		for _, e := range x {
			if p, n := largestContainer(e, path); n > bestN {
				visit(p, n)
			}
		}
	}
	return best, bestN
}

// tableSize is the AMQP 0-9-1 field-table encoding size of headers as the republish writes
// them: the converted values, after Temporal's JSON round trip (numbers become int64 when
// integral, else double; strings are long strings; objects tables; arrays arrays).
func tableSize(t map[string]any) int {
	n := 4 // table length
	for k, v := range t {
		n += 1 + len(k) + valueSize(v)
	}
	return n
}

// valueSize is a field value's size including its type octet.
func valueSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 1
	case bool:
		return 2
	case int64, float64, int, int32, uint32:
		return 9
	case string:
		return 5 + len(x)
	case []byte:
		if utf8.Valid(x) {
			return 5 + len(x)
		}
		return 5 + (len(x)+2)/3*4
	case map[string]any:
		return 1 + tableSize(x)
	case []any:
		n := 5
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	default:
		// Not produced by the header converter; count it as the widest scalar.
		return 9
	}
}
