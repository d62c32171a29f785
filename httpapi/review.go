package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentpool/agentpool/pool"
)

// Limits of a review.
const (
	// MaxReviewComments is the most comments one review may hold.
	MaxReviewComments = 200
	// MaxPRURL is the longest pull request URL recorded.
	MaxPRURL = 2048
	// reviewContext is how many lines around a commented line the prompt
	// quotes, on each side.
	reviewContext = 2
	// maxQuoted bounds one quoted line in the prompt, in bytes.
	maxQuoted = 240
)

// Reviews keeps the reviews of sessions' diffs and their pull requests'
// URLs; *wiring.Reviews satisfies it over the store. Unknown sessions
// are errors wrapping pool.ErrNotFound.
type Reviews interface {
	PutReview(ctx context.Context, r pool.Review) error
	// Reviews lists a session's reviews, oldest first.
	Reviews(ctx context.Context, session string) ([]pool.Review, error)
	// SetSessionPR records ("" forgets) a session's pull request URL.
	SetSessionPR(ctx context.Context, session, url string) error
	// SessionPRs returns the URL of every session that has one, by id.
	SessionPRs(ctx context.Context) (map[string]string, error)
	// TurnReply returns the agent's text of a turn.
	TurnReply(ctx context.Context, session string, turn int64) (string, error)
}

// ReviewRequest is the body of POST /v1/sessions/{id}/review.
type ReviewRequest struct {
	// Comments are on lines of the session's diff (GET
	// /v1/sessions/{id}/diff); at least one.
	Comments []pool.ReviewComment `json:"comments"`
	// Summary is optional overall text, put before the comments.
	Summary string `json:"summary,omitempty"`
	// Agent selects the agent; "" means the session's active agent.
	Agent string `json:"agent,omitempty"`
}

// PRRequest is the body of PUT /v1/sessions/{id}/pr.
type PRRequest struct {
	// URL is the pull request's http(s) URL; "" forgets the one recorded.
	URL string `json:"url"`
}

func (s *Server) reviewRoutes() {
	s.route("POST /v1/sessions/{id}/review", s.review, false)
	s.route("GET /v1/sessions/{id}/reviews", s.listReviews, false)
	s.route("PUT /v1/sessions/{id}/pr", s.putPR, false)
}

func (s *Server) reviewsOrErr() (Reviews, error) {
	if s.cfg.Reviews == nil {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeNotImplemented, Message: "this daemon keeps no reviews"}
	}
	return s.cfg.Reviews, nil
}

// review: POST /v1/sessions/{id}/review {comments, summary?, agent?} →
// 202 with the turn the review started (its review attached); with
// ?wait=true, 200 once it ended, the comments judged.
func (s *Server) review(w http.ResponseWriter, r *http.Request) error {
	rv, err := s.reviewsOrErr()
	if err != nil {
		return err
	}
	wait, err := boolParam(r, "wait")
	if err != nil {
		return err
	}
	var req ReviewRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	ctx := r.Context()
	if len(req.Comments) == 0 {
		return badRequest("comments", "field \"comments\" needs at least one comment: {path, line, text}")
	}
	if len(req.Comments) > MaxReviewComments {
		return badRequest("comments", "a review holds at most %d comments, not %d", MaxReviewComments, len(req.Comments))
	}
	sess, err := s.pool.Get(ctx, id)
	if err != nil {
		return err
	}
	d, err := s.pool.Diff(ctx, id, 0)
	if err != nil {
		return err
	}
	files := parsePatch(d.Patch)
	quotes := make([]string, len(req.Comments))
	for i := range req.Comments {
		c := &req.Comments[i]
		c.Addressed, c.AddressedBy = nil, ""
		q, err := checkComment(i, c, d, files, sess.Worktree.Path)
		if err != nil {
			return err
		}
		quotes[i] = q
	}
	t, err := s.pool.StartPrompt(ctx, pool.PromptRequest{Session: id, Agent: req.Agent, Text: reviewPrompt(req, quotes)})
	if err != nil {
		return err
	}
	rec := pool.Review{Session: id, Turn: t.ID, Summary: strings.TrimSpace(req.Summary), Comments: req.Comments, CreatedAt: time.Now().UTC()}
	if err := rv.PutReview(context.WithoutCancel(ctx), rec); err != nil {
		return fmt.Errorf("record the review of turn %d: %w", t.ID, err)
	}
	t.Review = &rec
	if !wait {
		w.Header().Set("Location", "/v1/sessions/"+id+"/turns/"+seqString(t.ID))
		writeJSON(w, http.StatusAccepted, t)
		return nil
	}
	return s.waitTurn(w, r, id, t.ID, true)
}

// checkComment validates comment i against the session's diff d (files
// parsed from its patch) and worktree, filling in its side, and returns
// the lines to quote around it.
func checkComment(i int, c *pool.ReviewComment, d pool.Diff, files map[string]*patchFile, worktree string) (string, error) {
	field := func(name string) string { return fmt.Sprintf("comments[%d].%s", i, name) }
	c.Text = strings.TrimSpace(c.Text)
	if c.Text == "" {
		return "", badRequest(field("text"), "%s must not be blank", field("text"))
	}
	if c.Side == "" {
		c.Side = pool.SideNew
	}
	if c.Side != pool.SideNew && c.Side != pool.SideOld {
		return "", badRequest(field("side"), "%s must be %q or %q, not %q", field("side"), pool.SideNew, pool.SideOld, c.Side)
	}
	var fc *pool.FileChange
	for j := range d.Files {
		f := &d.Files[j]
		if f.Path == c.Path || (c.Side == pool.SideOld && f.OldPath == c.Path) {
			fc = f
			break
		}
	}
	if c.Path == "" || fc == nil {
		return "", badRequest(field("path"), "%s %q is not a file of the session's diff", field("path"), c.Path)
	}
	if c.Line < 1 {
		return "", badRequest(field("line"), "%s must be a line number (1 or more), not %d", field("line"), c.Line)
	}
	if c.Side == pool.SideOld {
		pf := files[c.Path]
		if pf == nil {
			return "", badRequest(field("line"), "%s: line %d of the old %s is not shown in the diff", field("line"), c.Line, c.Path)
		}
		var shown []string
		found := false
		for _, l := range pf.Lines {
			if l.Kind != '+' && l.Old >= c.Line-reviewContext && l.Old <= c.Line+reviewContext {
				mark := "  "
				if l.Old == c.Line {
					mark, found = "> ", true
				}
				shown = append(shown, fmt.Sprintf("%s%d (removed) | %s", mark, l.Old, clip(l.Text)))
			}
		}
		if !found {
			return "", badRequest(field("line"), "%s: line %d of the old %s is not shown in the diff", field("line"), c.Line, c.Path)
		}
		return strings.Join(shown, "\n"), nil
	}
	if fc.Status == "deleted" {
		return "", badRequest(field("side"), "%s: %s was deleted; comment on its removed lines with side \"old\"", field("side"), c.Path)
	}
	lines, err := fileLines(worktree, c.Path)
	if err != nil {
		return "", badRequest(field("path"), "%s: cannot read %s in the worktree: %v", field("path"), c.Path, err)
	}
	if c.Line > len(lines) {
		return "", badRequest(field("line"), "%s: %s has %d lines, not %d", field("line"), c.Path, len(lines), c.Line)
	}
	var shown []string
	for n := max(1, c.Line-reviewContext); n <= min(len(lines), c.Line+reviewContext); n++ {
		mark := "  "
		if n == c.Line {
			mark = "> "
		}
		shown = append(shown, fmt.Sprintf("%s%d | %s", mark, n, clip(lines[n-1])))
	}
	return strings.Join(shown, "\n"), nil
}

// maxReviewedFile bounds the size of a file a review reads lines of.
const maxReviewedFile = 8 << 20

// fileLines reads a regular file of the worktree (never outside it) as
// lines.
func fileLines(worktree, path string) ([]string, error) {
	root, err := os.OpenRoot(worktree)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// The agent made the file: it may be a FIFO (opened without waiting
	// for a writer, then refused) or huge (refused past maxReviewedFile).
	f, err := root.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case st.Size() > maxReviewedFile:
		return nil, fmt.Errorf("%d bytes, more than the %d a review quotes from", st.Size(), maxReviewedFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxReviewedFile+1))
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, errors.New("a binary file")
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

// clip bounds a quoted line.
func clip(s string) string {
	s = strings.TrimRight(s, "\r")
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " …"
}

// reviewPrompt is the prompt of a review: the summary, then each comment
// with its file, line and the lines around it, then how to answer.
func reviewPrompt(req ReviewRequest, quotes []string) string {
	var b strings.Builder
	b.WriteString("Review of your changes. Please address each comment below.\n")
	if s := strings.TrimSpace(req.Summary); s != "" {
		b.WriteString("\n" + s + "\n")
	}
	for i, c := range req.Comments {
		where := fmt.Sprintf("%s:%d", c.Path, c.Line)
		if c.Side == pool.SideOld {
			where += " (a line your changes removed; numbered as in the base)"
		}
		fmt.Fprintf(&b, "\n%d. %s\n```\n%s\n```\n%s\n", i+1, where, quotes[i], c.Text)
	}
	b.WriteString("\nIn your reply, name each comment you addressed by its location (path:line).\n")
	return b.String()
}

// listReviews: GET /v1/sessions/{id}/reviews → the session's reviews,
// oldest first, each judged once its turn has ended.
func (s *Server) listReviews(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.pool.Get(r.Context(), id); err != nil {
		return err
	}
	turns, err := s.pool.Turns(r.Context(), id)
	if err != nil {
		return err
	}
	byTurn, err := s.reviewsOf(r.Context(), id, turns)
	if err != nil {
		return err
	}
	out := []pool.Review{}
	for _, t := range turns {
		if rv := byTurn[t.ID]; rv != nil {
			out = append(out, *rv)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// reviewsOf returns the reviews of session's turns by turn, judging (and
// recording the judgement of) those whose turn has ended. Without a
// Reviews store, there are none.
func (s *Server) reviewsOf(ctx context.Context, session string, turns []pool.Turn) (map[int64]*pool.Review, error) {
	if s.cfg.Reviews == nil {
		return nil, nil
	}
	list, err := s.cfg.Reviews.Reviews(ctx, session)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	ended := map[int64]bool{}
	for _, t := range turns {
		ended[t.ID] = t.EndedAt != nil
	}
	out := make(map[int64]*pool.Review, len(list))
	for i := range list {
		rv := &list[i]
		if !rv.Judged && ended[rv.Turn] {
			if err := s.judge(ctx, rv); err != nil {
				s.log.Warn("judge a review", "session", session, "turn", rv.Turn, logKeyErr, err)
			}
		}
		out[rv.Turn] = rv
	}
	return out, nil
}

// judge marks each comment of rv addressed or not by its ended turn, and
// records that.
func (s *Server) judge(ctx context.Context, rv *pool.Review) error {
	d, err := s.pool.Diff(ctx, rv.Session, rv.Turn)
	if err != nil {
		return err
	}
	reply, err := s.cfg.Reviews.TurnReply(ctx, rv.Session, rv.Turn)
	if err != nil {
		return err
	}
	files := parsePatch(d.Patch)
	for i := range rv.Comments {
		c := &rv.Comments[i]
		ok, by := judgeComment(*c, d, files, reply)
		c.Addressed, c.AddressedBy = &ok, by
	}
	rv.Judged = true
	return s.cfg.Reviews.PutReview(context.WithoutCancel(ctx), *rv)
}

// withReviews attaches their reviews to turns.
func (s *Server) withReviews(ctx context.Context, session string, turns []pool.Turn) error {
	byTurn, err := s.reviewsOf(ctx, session, turns)
	if err != nil {
		return err
	}
	for i := range turns {
		turns[i].Review = byTurn[turns[i].ID]
	}
	return nil
}

// withPR fills in the recorded pull request URL of sessions.
func (s *Server) withPR(ctx context.Context, sessions []pool.Session) error {
	if s.cfg.Reviews == nil || len(sessions) == 0 {
		return nil
	}
	prs, err := s.cfg.Reviews.SessionPRs(ctx)
	if err != nil {
		return err
	}
	for i := range sessions {
		sessions[i].PRURL = prs[sessions[i].ID]
	}
	return nil
}

// putPR: PUT /v1/sessions/{id}/pr {url} records the session's pull request
// ("" forgets it) → 200 with the session.
func (s *Server) putPR(w http.ResponseWriter, r *http.Request) error {
	rv, err := s.reviewsOrErr()
	if err != nil {
		return err
	}
	var req PRRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	req.URL = strings.TrimSpace(req.URL)
	if err := checkPRURL(req.URL); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.pool.Get(r.Context(), id); err != nil {
		return err
	}
	if err := rv.SetSessionPR(r.Context(), id, req.URL); err != nil {
		return err
	}
	sess, err := s.pool.Get(r.Context(), id)
	if err != nil {
		return err
	}
	one := []pool.Session{sess}
	if err := s.withPR(r.Context(), one); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, one[0])
	return nil
}

// checkPRURL accepts "" or an absolute http(s) URL with a host and no
// credentials.
func checkPRURL(raw string) error {
	if raw == "" {
		return nil
	}
	if len(raw) > MaxPRURL {
		return badRequest("url", "field \"url\" is longer than %d bytes", MaxPRURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		strings.ContainsAny(raw, " \t\r\n\"<>") {
		return badRequest("url", "field \"url\" must be an http(s) URL such as https://github.com/o/r/pull/1, not %q", raw)
	}
	return nil
}

// Review sends a review of a session's diff to its agent as the next
// prompt; with wait, it returns once that turn has ended, its comments
// judged.
func (c *Client) Review(ctx context.Context, session string, req ReviewRequest, wait bool) (pool.Turn, error) {
	p := sessionPath(session, "review")
	if wait {
		p += "?wait=true"
	}
	var t pool.Turn
	return t, c.call(ctx, http.MethodPost, p, req, &t)
}

// Reviews lists a session's reviews, oldest first.
func (c *Client) Reviews(ctx context.Context, session string) ([]pool.Review, error) {
	var out []pool.Review
	return out, c.call(ctx, http.MethodGet, sessionPath(session, "reviews"), nil, &out)
}

// SetSessionPR records the URL of a session's pull request ("" forgets
// it) and returns the session.
func (c *Client) SetSessionPR(ctx context.Context, session, prURL string) (pool.Session, error) {
	var out pool.Session
	return out, c.call(ctx, http.MethodPut, sessionPath(session, "pr"), PRRequest{URL: prURL}, &out)
}
