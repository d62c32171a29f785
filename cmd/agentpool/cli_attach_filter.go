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
// UTF-8) is dropped as one begun by ESC ], and may end with U+009C.
// A sequence split across writes is recognised all the same: what may
// begin one is held until the next write says.
type oscFilter struct {
	w     io.Writer
	state oscState
	num   []byte // the held "ESC ]" and digits of an OSC being read
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

// Write writes p without the dropped sequences; it reports all of p
// written when what remains was.
func (f *oscFilter) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p)+len(f.num)+1)
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch f.state {
		case oscText:
			switch b {
			case 0x1b:
				f.state = oscEsc
				continue
			case 0xc2:
				f.state = c1Lead
				continue
			}
			out = append(out, b)
		case c1Lead:
			if b == 0x9d { // U+009D, OSC
				f.state, f.num = oscNumber, append(f.num[:0], 0xc2, 0x9d)
				continue
			}
			out = append(out, 0xc2)
			f.state = oscText
			i-- // b again, outside an OSC
		case oscEsc:
			if b == ']' {
				f.state, f.num = oscNumber, append(f.num[:0], 0x1b, ']')
				continue
			}
			if b == 'P' {
				f.state, f.num = dcsHead, append(f.num[:0], 0x1b, 'P')
				continue
			}
			out = append(out, 0x1b)
			f.state = oscText
			i-- // b again, outside an OSC
		case oscNumber:
			if b >= '0' && b <= '9' && len(f.num)-2 < maxOSCNumber {
				f.num = append(f.num, b)
				continue
			}
			if droppedOSC(string(f.num[2:])) && (b == ';' || b == 0x07 || b == 0x1b) {
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
			}
		case oscDropC1:
			if b == 0x9c { // U+009C, ST
				f.state = oscText
				continue
			}
			f.state = oscDrop
			i--
		case dcsHead:
			body := f.num[2:]
			switch {
			case len(body) == 0 && b == 0x1b: // screen's passthrough
				f.num, f.state = f.num[:0], dcsDropEsc
				continue
			case len(body) < len(tmuxPassthrough) && b == tmuxPassthrough[len(body)]:
				f.num = append(f.num, b)
				if len(f.num)-2 == len(tmuxPassthrough) {
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
			}
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
