package main

import "io"

// oscFilter passes a terminal agent's screen to the user's terminal
// without the operating system commands that reach beyond the screen:
// clipboard writes (OSC 52) and window or icon title changes (OSC 0, 1
// and 2) are dropped, whole, and so are the device control strings that
// ask a terminal multiplexer to pass a sequence on to the terminal it
// runs in (tmux's "ESC P tmux;", screen's "ESC P ESC"), which would carry
// such a command past the filter; every other byte is written as it came.
// An OSC begun by the C1 control U+009D (which some terminals obey in
// UTF-8) is dropped as one begun by ESC ], and may end with U+009C; a
// DCS begun by U+0090 is read as one begun by ESC P. So are the 8-bit
// controls themselves, the bytes 0x9d, 0x90 and 0x9c, where they stand
// alone rather than inside a UTF-8 character (a terminal in an 8-bit
// mode obeys them). A sequence split across writes is recognised all
// the same: what may begin one is held until the next write says.
type oscFilter struct {
	w     io.Writer
	state oscState
	num   []byte // the held "ESC ]" and digits of an OSC being read
	lead  int    // how many bytes of num introduce it ("ESC ]": 2, 0x9d: 1)
	cont  int    // continuation bytes still expected of a UTF-8 character
}

type oscState int

const (
	oscText    oscState = iota // outside an OSC
	oscEsc                     // after an ESC, which is held
	oscNumber                  // in an OSC's number, held in num
	oscDrop                    // in a dropped OSC's text
	oscDropEsc                 // after an ESC in a dropped OSC
	dcsHead                    // in a DCS's first bytes, held in num
	dcsDrop                    // in a dropped DCS
	dcsDropEsc                 // after an ESC in a dropped DCS
	c1Lead                     // after a held 0xC2, which may begin U+009D
	oscDropC1                  // after a 0xC2 in a dropped OSC
	dcsDropC1                  // after a 0xC2 in a dropped DCS
)

// tmuxPassthrough begins the data of a DCS that tmux passes on.
const tmuxPassthrough = "tmux;"

// maxOSCNumber bounds the digits held: a longer number is no command
// dropped, and its bytes pass.
const maxOSCNumber = 4

// newOSCFilter returns an oscFilter writing to w.
func newOSCFilter(w io.Writer) *oscFilter { return &oscFilter{w: w} }

// droppedOSC says whether the OSC numbered n is dropped.
func droppedOSC(n string) bool {
	switch n {
	case "0", "1", "2", "52":
		return true
	}
	return false
}

// free says whether b stands alone, rather than continues the UTF-8
// character begun before it, and keeps count of the continuations
// expected.
func (f *oscFilter) free(b byte) bool {
	if f.cont > 0 && b&0xc0 == 0x80 {
		f.cont--
		return false
	}
	f.cont = 0
	switch {
	case b >= 0xc2 && b <= 0xdf:
		f.cont = 1
	case b >= 0xe0 && b <= 0xef:
		f.cont = 2
	case b >= 0xf0 && b <= 0xf4:
		f.cont = 3
	}
	return true
}

// begin holds the bytes that introduce a sequence and enters state.
func (f *oscFilter) begin(state oscState, intro ...byte) {
	f.state, f.num, f.lead = state, append(f.num[:0], intro...), len(intro)
}

// Write writes p without the dropped sequences; it reports all of p
// written when what remains was.
func (f *oscFilter) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p)+len(f.num)+1)
	seen, alone := -1, false
	for i := 0; i < len(p); i++ {
		b := p[i]
		if i != seen { // a byte read again after a state change is counted once
			seen, alone = i, f.free(b)
		}
		switch f.state {
		case oscText:
			switch {
			case b == 0x1b:
				f.state = oscEsc
				continue
			case b == 0xc2:
				f.state = c1Lead
				continue
			case alone && b == 0x9d: // 8-bit OSC
				f.begin(oscNumber, b)
				continue
			case alone && b == 0x90: // 8-bit DCS
				f.begin(dcsHead, b)
				continue
			}
			out = append(out, b)
		case c1Lead:
			if b == 0x9d { // U+009D, OSC
				f.begin(oscNumber, 0xc2, 0x9d)
				continue
			}
			if b == 0x90 { // U+0090, DCS
				f.begin(dcsHead, 0xc2, 0x90)
				continue
			}
			out = append(out, 0xc2)
			f.state = oscText
			i-- // b again, outside an OSC
		case oscEsc:
			if b == ']' {
				f.begin(oscNumber, 0x1b, ']')
				continue
			}
			if b == 'P' {
				f.begin(dcsHead, 0x1b, 'P')
				continue
			}
			out = append(out, 0x1b)
			f.state = oscText
			i-- // b again, outside an OSC
		case oscNumber:
			if b >= '0' && b <= '9' && len(f.num)-f.lead < maxOSCNumber {
				f.num = append(f.num, b)
				continue
			}
			if droppedOSC(string(f.num[f.lead:])) && (b == ';' || b == 0x07 || b == 0x1b) {
				f.num = f.num[:0]
				switch b {
				case ';':
					f.state = oscDrop
				case 0x07:
					f.state = oscText
				case 0x1b:
					f.state = oscDropEsc
				}
				continue
			}
			out = append(out, f.num...)
			f.num = f.num[:0]
			f.state = oscText
			i-- // b again, as the passed OSC's own
		case oscDrop:
			switch b {
			case 0x07, 0x18, 0x1a: // BEL ends it, CAN and SUB cancel it
				f.state = oscText
			case 0x1b:
				f.state = oscDropEsc
			case 0xc2:
				f.state = oscDropC1
			case 0x9c: // 8-bit ST
				if alone {
					f.state = oscText
				}
			}
		case oscDropC1:
			if b == 0x9c { // U+009C, ST
				f.state = oscText
				continue
			}
			f.state = oscDrop
			i--
		case dcsHead:
			body := f.num[f.lead:]
			switch {
			case len(body) == 0 && b == 0x1b: // screen's passthrough
				f.num, f.state = f.num[:0], dcsDropEsc
				continue
			case len(body) < len(tmuxPassthrough) && b == tmuxPassthrough[len(body)]:
				f.num = append(f.num, b)
				if len(f.num)-f.lead == len(tmuxPassthrough) {
					f.num, f.state = f.num[:0], dcsDrop
				}
				continue
			}
			out = append(out, f.num...)
			f.num = f.num[:0]
			f.state = oscText
			i-- // b again, as the passed DCS's own
		case dcsDrop:
			switch b {
			case 0x18, 0x1a:
				f.state = oscText
			case 0x1b:
				f.state = dcsDropEsc
			case 0xc2:
				f.state = dcsDropC1
			case 0x9c: // 8-bit ST
				if alone {
					f.state = oscText
				}
			}
		case dcsDropC1:
			if b == 0x9c { // U+009C, ST
				f.state = oscText
				continue
			}
			f.state = dcsDrop
			i--
		case dcsDropEsc:
			// ST ends it; a doubled ESC (tmux's) or any other byte is
			// still its data.
			if b == '\\' {
				f.state = oscText
			} else {
				f.state = dcsDrop
			}
		case oscDropEsc:
			if b == '\\' { // ST
				f.state = oscText
				continue
			}
			// An ESC of another sequence ends the OSC, and begins that.
			f.state = oscEsc
			i--
		}
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := f.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
