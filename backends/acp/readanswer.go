package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"unicode/utf8"
	"unsafe"

	"github.com/agentpool/agentpool/acpfs"
)

// contentLender is a FileSystem that lends a file's content, read piece by
// piece, to a function and keeps the read's memory accounted until it
// returns (acpfs.FS).
type contentLender interface {
	ReadTextFileFunc(ctx context.Context, path string, line, limit *int, use func(*acpfs.Content) error) error
}

// answerPiece is the most of an encoded answer held at once, the share of
// the read budget acpfs counts for it (acpfs.ReadChunk): the answer is
// written to the agent in pieces of at most this many bytes (but for a
// request id longer than that).
const answerPiece = acpfs.ReadChunk

// encodeWindow is how much content is encoded at a time; its worst case, 6
// bytes a byte (\u00XX), is what must be free in the answer's buffer.
const encodeWindow = 4 << 10

// maxEscape is the longest encoding of one byte of content.
const maxEscape = len(`\u00XX`)

// writeReadAnswer writes the JSON-RPC answer to fs/read_text_file id,
// newline-terminated, through put in pieces of at most answerPiece bytes,
// with the content that each lends in pieces ending on character
// boundaries (acpfs.Content.Each): the bytes encoding/json would write for
// the whole answer (HTML characters, U+2028 and U+2029 escaped), never held
// whole. An error of put ends the answer; an error of each (the file, after
// the answer began) still ends the line, with the content cut short, and
// is returned.
func writeReadAnswer(put func([]byte) error, id json.RawMessage, each func(func([]byte) error) error) error {
	var cid bytes.Buffer
	if json.Compact(&cid, id) != nil {
		cid.Reset()
		cid.Write(id)
	}
	buf := make([]byte, 0, answerPiece)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, cid.Bytes()...)
	buf = append(buf, `,"result":{"content":"`...)
	var putErr error
	err := each(func(piece []byte) error {
		s := unsafe.String(unsafe.SliceData(piece), len(piece))
		for len(s) > 0 {
			n := min(len(s), encodeWindow)
			for k := 1; k < utf8.UTFMax && n < len(s) && !utf8.RuneStart(s[n]); k++ {
				n--
			}
			if len(buf)+maxEscape*n > cap(buf) {
				if putErr = put(buf); putErr != nil {
					return putErr
				}
				buf = buf[:0]
			}
			buf = appendJSONText(buf, s[:n])
			s = s[n:]
		}
		return nil
	})
	if putErr != nil {
		return putErr
	}
	buf = append(buf, "\"}}\n"...)
	if perr := put(buf); perr != nil {
		return perr
	}
	return err
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

// appendJSONText appends s as the inside of a JSON string (without the
// quotes), as encoding/json does.
func appendJSONText(dst []byte, s string) []byte {
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
	return append(dst, s[start:]...)
}
