package pty

import "bytes"

// maxCSI bounds a held control sequence; a longer one is passed on as it
// is (the emulator ends it at 256 bytes).
const maxCSI = 128

// States of csiFilter.
const (
	filterGround = iota
	filterEsc    // after ESC
	filterCSI    // inside ESC [
)

// csiFilter removes from terminal output the control sequences that the
// emulator (vt10x) would misread, before it sees them. vt10x knows only
// the "?" private marker and no intermediate bytes, and it ignores the
// marker for most final bytes: "CSI ? u", the query of the kitty keyboard
// protocol that Claude Code sends at start, would restore the cursor, and
// "CSI > 1 u" or "CSI ? 1049 s" likewise. A terminal such as xterm or
// tmux ignores what it does not implement; so does the filter:
//
//   - sequences with a private marker "<", "=" or ">" (kitty keyboard,
//     modifyOtherKeys, secondary device attributes, XTVERSION);
//   - sequences with intermediate bytes (cursor style "CSI 2 SP q", mode
//     reports "CSI ? 2026 $ p", soft reset "CSI ! p");
//   - "?" sequences other than set and reset mode ("CSI ? … h/l"), such
//     as XTSAVE "CSI ? … s" and XTRESTORE "CSI ? … r".
//
// Everything else, including every other escape and string sequence,
// passes unchanged and in order. The filter keeps its state across
// writes, so a sequence split between two reads is judged whole.
type csiFilter struct {
	state int
	seq   []byte // the held sequence, from its ESC
	out   []byte // reused output
}

// apply returns p without the sequences the emulator would misread. The
// result may be p itself or a buffer reused by the next call.
func (f *csiFilter) apply(p []byte) []byte {
	if f.state == filterGround && bytes.IndexByte(p, 0x1b) < 0 {
		return p
	}
	out := f.out[:0]
	for _, c := range p {
		switch f.state {
		case filterGround:
			if c == 0x1b {
				f.state = filterEsc // held until we know what follows
				continue
			}
			out = append(out, c)
		case filterEsc:
			switch c {
			case '[':
				f.seq = append(f.seq[:0], 0x1b, '[')
				f.state = filterCSI
			case 0x1b:
				out = append(out, 0x1b) // the first ESC did nothing; hold the second
			default:
				out = append(out, 0x1b, c)
				f.state = filterGround
			}
		case filterCSI:
			out = f.csiByte(out, c)
		}
	}
	f.out = out
	return out
}

// csiByte takes byte c of a held control sequence.
func (f *csiFilter) csiByte(out []byte, c byte) []byte {
	switch {
	case c >= 0x20 && c <= 0x3f: // parameter or intermediate
		if len(f.seq) >= maxCSI {
			f.state = filterGround
			return append(append(out, f.seq...), c)
		}
		f.seq = append(f.seq, c)
	case c >= 0x40 && c <= 0x7e: // final
		f.seq = append(f.seq, c)
		f.state = filterGround
		if !misreadCSI(f.seq[2:]) {
			out = append(out, f.seq...)
		}
	case c == 0x1b: // cancels the sequence and starts another
		f.state = filterEsc
	case c == 0x18 || c == 0x1a: // CAN, SUB: cancel the sequence
		f.state = filterGround
		out = append(out, c)
	case c < 0x20 || c == 0x7f:
		// A control character inside a sequence is executed at once,
		// and the sequence goes on.
		out = append(out, c)
	default: // not part of a sequence: give up, pass it on
		f.state = filterGround
		out = append(append(out, f.seq...), c)
	}
	return out
}

// misreadCSI reports whether the emulator would misread the control
// sequence whose bytes after "ESC [" are body (parameters, intermediates,
// final byte).
func misreadCSI(body []byte) bool {
	params, final := body[:len(body)-1], body[len(body)-1]
	for _, c := range params {
		if c >= 0x20 && c <= 0x2f { // an intermediate byte
			return true
		}
	}
	if len(params) == 0 {
		return false
	}
	switch params[0] {
	case '<', '=', '>':
		return true
	case '?':
		return final != 'h' && final != 'l'
	}
	return false
}
