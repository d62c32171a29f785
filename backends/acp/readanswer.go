package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"unicode/utf8"
)

// contentLender is a FileSystem that lends a file's content to a function
// and keeps the read's memory accounted until it returns (acpfs.FS).
type contentLender interface {
	ReadTextFileFunc(ctx context.Context, path string, line, limit *int, use func(string) error) error
}

// readAnswer encodes the JSON-RPC answer to fs/read_text_file id with
// content, newline-terminated, in one allocation of the exact size: the
// bytes encoding/json would write (HTML characters, U+2028 and U+2029
// escaped), without its growing buffer and final copy.
func readAnswer(id json.RawMessage, content string) []byte {
	var cid bytes.Buffer
	if json.Compact(&cid, id) != nil {
		cid.Reset()
		cid.Write(id)
	}
	const pre, post = `{"jsonrpc":"2.0","id":`, `,"result":{"content":`
	out := make([]byte, 0, len(pre)+cid.Len()+len(post)+jsonStringLen(content)+3)
	out = append(out, pre...)
	out = append(out, cid.Bytes()...)
	out = append(out, post...)
	out = appendJSONString(out, content)
	return append(out, "}}\n"...)
}

const hexDigits = "0123456789abcdef"

// jsonEscape returns the escape of an ASCII byte, "" when it needs none.
func jsonEscape(c byte) string {
	switch c {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if c < 0x20 || c == '<' || c == '>' || c == '&' {
		return `\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
	}
	return ""
}

// jsonStringLen is the length of appendJSONString(nil, s).
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if e := jsonEscape(c); e != "" {
				n += len(e)
			} else {
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += len(`\ufffd`)
		case r == '\u2028' || r == '\u2029':
			n += len(`\u2028`)
		default:
			n += size
		}
		i += size
	}
	return n
}

// appendJSONString appends s as a JSON string, as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if e := jsonEscape(c); e != "" {
				dst = append(dst, s[start:i]...)
				dst = append(dst, e...)
				start = i + 1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u202`...)
			dst = append(dst, hexDigits[r&0xf])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
