package backends

import (
	"strings"
	"unicode"
)

// AuthRequiredError is an agent's refusal to work until the user logs in
// (ACP error -32000): it wraps ErrAuthRequired and keeps the agent's own
// words, which are often all a user has to go on when the agent offers
// no login method ("Auggie does not currently support authenticating
// over ACP. Please run `auggie login` from your terminal").
type AuthRequiredError struct {
	// Refusal is the agent's answer for a person: its message and, when
	// it gave them, its details.
	Refusal string
	// NoMethod is set when the agent offered no login method in its
	// initialize answer: there is nothing agentpool login can do, the
	// user logs in the agent's own way.
	NoMethod bool
}

// Error is "the agent needs you to log in (REFUSAL)".
func (e *AuthRequiredError) Error() string {
	if e.Refusal == "" {
		return ErrAuthRequired.Error()
	}
	return ErrAuthRequired.Error() + " (" + e.Refusal + ")"
}

// Unwrap returns ErrAuthRequired.
func (e *AuthRequiredError) Unwrap() error { return ErrAuthRequired }

// Said returns what the agent said beyond ACP's "Authentication
// required", "" when it said nothing more.
func (e *AuthRequiredError) Said() string { return AgentWords(e.Refusal) }

// AgentWords returns an agent's login refusal without ACP's standard
// words ("Authentication required"), "" when nothing else is left.
func AgentWords(refusal string) string {
	s := strings.TrimSpace(refusal)
	if rest, ok := cutFold(s, "Authentication required"); ok {
		s = strings.TrimSpace(strings.TrimLeft(rest, ":.;- "))
	}
	return s
}

// cutFold is strings.CutPrefix ignoring case.
func cutFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// maxLoginCommand bounds the length of a login command found in an
// agent's words.
const maxLoginCommand = 80

// LoginCommand returns the command an agent's words name for logging in,
// the first one quoted in backticks ("Please run `auggie login` from
// your terminal" names "auggie login"), "" when they name none. Only a
// short line of printable characters that starts with a letter counts:
// the words are the agent's, shown to the user, never run.
func LoginCommand(words string) string {
	rest := words
	for {
		_, after, ok := strings.Cut(rest, "`")
		if !ok {
			return ""
		}
		cmd, tail, ok := strings.Cut(after, "`")
		if !ok {
			return ""
		}
		if isCommandText(cmd) {
			return cmd
		}
		rest = tail
	}
}

func isCommandText(s string) bool {
	if s == "" || len(s) > maxLoginCommand || !unicode.IsLetter(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
