// Package jsonscan validates JSON and walks the members of objects
// without decoding them, at the speed of a byte loop: an agent's line of a
// few MiB (a message chunk with a big text) is checked once and its few
// small fields found, where encoding/json would validate it, then scan it
// again to decode, one state-machine call per byte each time.
//
// Valid accepts exactly what encoding/json.Valid accepts (RFC 8259, with
// no check of UTF-8, as encoding/json). Members and Value work on input
// that Valid accepted; on anything else their results mean nothing.
package jsonscan

import (
	"bytes"
	"encoding/binary"
)

// Byte classes of the string fast path: a byte that needs a look (the end
// of a string, an escape, or a control character, which JSON forbids in a
// string) against one that does not.
var special = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// Valid reports whether b is one JSON value, with optional white space
// around it.
func Valid(b []byte) bool {
	i, ok := value(b, skipSpace(b, 0), 0)
	return ok && skipSpace(b, i) == len(b)
}

// maxDepth bounds the nesting Valid accepts, as encoding/json's 10,000.
const maxDepth = 10000

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value checks the value starting at b[i] and returns the index after it.
func value(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return str(b, i)
	case c == '{':
		return object(b, i, depth+1)
	case c == '[':
		return array(b, i, depth+1)
	case c == '-' || c >= '0' && c <= '9':
		return number(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// str checks the string starting at b[i] (a quote) and returns the index
// after its closing quote.
func str(b []byte, i int) (int, bool) {
	i++
	for {
		// Eight bytes at a time while none needs a look, then one by one.
		for len(b)-i >= 8 && !needsLook(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && !special[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// needsLook reports whether any of the eight bytes of x is a quote, a
// backslash or a control character (below 0x20), as special says.
func needsLook(x uint64) bool {
	quote := x ^ ('"' * ones)
	slash := x ^ ('\\' * ones)
	zeroQuote := (quote - ones) &^ quote
	zeroSlash := (slash - ones) &^ slash
	below := (x - 0x20*ones) &^ x
	return (zeroQuote|zeroSlash|below)&highs != 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number checks the number starting at b[i].
func number(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

func object(b []byte, i, depth int) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = str(b, i); !ok {
			return i, false
		}
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		if i, ok = value(b, skipSpace(b, i+1), depth); !ok {
			return i, false
		}
		var more bool
		if i, more, ok = after(b, i, '}'); !ok || !more {
			return i, ok
		}
	}
}

func array(b []byte, i, depth int) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = value(b, i, depth); !ok {
			return i, false
		}
		var more bool
		if i, more, ok = after(b, i, ']'); !ok || !more {
			return i, ok
		}
	}
}

// after reads what follows an element of a container that end closes,
// from b[i]: a comma (more is set, and the index is that of the next
// element) or end (the index is past it); anything else is not valid.
func after(b []byte, i int, end byte) (_ int, more, ok bool) {
	i = skipSpace(b, i)
	if i >= len(b) {
		return i, false, false
	}
	switch b[i] {
	case ',':
		return skipSpace(b, i+1), true, true
	case end:
		return i + 1, false, true
	}
	return i, false, false
}

// skipValid returns the index after the value starting at b[i] in valid
// JSON: strings by their quotes and escapes alone, containers by depth.
func skipValid(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number or a literal: up to the next delimiter
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index after the valid string starting at b[i]:
// its closing quote is the first one not escaped, that is not preceded by
// an odd run of backslashes.
func skipString(b []byte, i int) int {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

// Members calls fn with each member of the object v (valid JSON, white
// space around it allowed), in order: its key as written between the
// quotes (escapes not undone: escaped says whether it has any) and its
// value as written. It stops when fn returns false. It reports whether v
// is an object.
func Members(v []byte, fn func(key []byte, escaped bool, val []byte) bool) bool {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return false
	}
	i = skipSpace(v, i+1)
	for i < len(v) && v[i] == '"' {
		end := skipString(v, i)
		key := v[i+1 : end-1]
		escaped := false
		for _, c := range key {
			if c == '\\' {
				escaped = true
				break
			}
		}
		i = skipSpace(v, end)
		i = skipSpace(v, i+1) // the colon
		vend := skipValid(v, i)
		if !fn(key, escaped, v[i:vend]) {
			return true
		}
		i = skipSpace(v, vend)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return true
}
