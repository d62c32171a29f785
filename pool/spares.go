package pool

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// Spares make sessions instant. For each repository the daemon keeps
// spares for (SparesConfig.Repos) and each provider asking for them
// (SparesConfig.Providers), the pool keeps that many spares ready: a
// worktree made ahead at the head of the repository's HEAD, its setup
// already run, and the provider's agent already started in it. The next
// Create on that repository and agent, at the default base, adopts one
// instead of making a worktree and starting an agent.
//
// A spare is a session made ahead without a row in the store: its id
// (SpareIDPrefix and random letters), worktree path and branch are the
// ones the adopting session keeps. They are made before adoption, not at
// it, because the agent is confined to its worktree's path and branch and
// to its session's cgroup when it starts: renaming any of them under a
// running agent would leave it confined to the old ones. So a Create that
// names its own session id, a base, its own MCP servers or an agent
// session to take up never adopts a spare (it gets the usual new
// session). The agent's own session (ACP session/new) is made while the
// spare is prepared, with the worktree as its cwd, which is the session's.
//
// Spares take backend slots (max_warm) like any agent, but only free
// ones, and are the first backends evicted when a prompt or a session's
// warm-up needs a slot. They are replenished in the background, and
// discarded (worktree and branch removed, agent stopped) when the base's
// head moves, the setup file or its trust changes, or the repository or
// provider no longer asks for them; a spare on an old commit is never
// adopted, as the head is checked again at adoption. Shutdown discards
// them all; a spare left by a daemon that was killed is a worktree no
// session knows, which the daemon removes at its next start (see
// SpareIDPrefix).
//
// The daemon-wide stream tells about them: EventSpareReady,
// EventSpareDiscarded (with a reason), and EventSpareAdopted, which the
// adopting session's stream carries too.
const (
	EventSpareReady     backends.EventType = "spare.ready"
	EventSpareAdopted   backends.EventType = "spare.adopted"
	EventSpareDiscarded backends.EventType = "spare.discarded"
)

// SpareIDPrefix starts the id of every spare, and so of every session
// that adopted one: a worktree whose session id starts with it and that
// no stored session knows is a spare a killed daemon left behind.
const SpareIDPrefix = "sp-"

// DefaultSpareInterval is how often the pool checks its spares when
// SparesConfig.Interval is not set.
const DefaultSpareInterval = 2 * time.Second

// SparesConfig configures spares; its zero value keeps none.
type SparesConfig struct {
	// Repos lists the repositories to keep spares for (absolute paths).
	Repos func(ctx context.Context) []string
	// Providers maps each provider id that wants spares to how many per
	// repository.
	Providers func() map[string]int
	// Git reads what makes a spare stale; required with Providers.
	Git SpareGit
	// Interval is how often spares are checked and replenished (default
	// DefaultSpareInterval); Create wakes the check at once.
	Interval time.Duration
}

// SpareGit is what spares need to know of a repository.
type SpareGit interface {
	// Head is the commit the repository's HEAD names now.
	Head(ctx context.Context, repo string) (string, error)
	// SetupState identifies the repository's setup file and whether it
	// is trusted; a spare made under another state is discarded.
	SetupState(ctx context.Context, repo string) (string, error)
}

// SpareStatus is one spare, for the pool's listing.
type SpareStatus struct {
	ID        string    `json:"id"`
	Repo      string    `json:"repo"`
	Agent     string    `json:"agent"`
	Base      string    `json:"base_commit"`
	Worktree  string    `json:"worktree,omitempty"`
	State     string    `json:"state"` // preparing | starting | ready
	CreatedAt time.Time `json:"created_at"`
}

// spare is one spare; its fields are guarded by Pool.mu.
type spare struct {
	id, repo, agent string
	base, setup     string
	created         time.Time
	wt              Worktree
	s               *session
	e               *entry
	setupEvents     []SetupEvent
	ready           bool
	gone            bool
	// wtTaken and announced make finishDrop's work happen once.
	wtTaken, announced bool
}

func (p *Pool) sparesOn() bool {
	c := p.cfg.Spares
	return c.Providers != nil && c.Repos != nil && c.Git != nil
}

// Spares lists the spares, by repository, agent and id.
func (p *Pool) Spares() []SpareStatus {
	p.mu.Lock()
	out := make([]SpareStatus, 0, len(p.spares))
	for _, sp := range p.spares {
		st := SpareStatus{ID: sp.id, Repo: sp.repo, Agent: sp.agent, Base: sp.base, Worktree: sp.wt.Path, State: "preparing", CreatedAt: sp.created}
		switch {
		case sp.ready:
			st.State = "ready"
		case sp.e != nil:
			st.State = "starting"
		}
		out = append(out, st)
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Repo != b.Repo {
			return a.Repo < b.Repo
		}
		if a.Agent != b.Agent {
			return a.Agent < b.Agent
		}
		return a.ID < b.ID
	})
	return out
}

// runSpares keeps the spares until ctx or the pool ends.
func (p *Pool) runSpares(ctx context.Context) {
	iv := p.cfg.Spares.Interval
	if iv <= 0 {
		iv = DefaultSpareInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		p.tendSpares(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.spareWake:
		}
	}
}

// wakeSpares asks runSpares for a check now.
func (p *Pool) wakeSpares() {
	select {
	case p.spareWake <- struct{}{}:
	default:
	}
}

// tendSpares discards stale and unwanted spares and starts the missing
// ones, as far as free backend slots allow.
func (p *Pool) tendSpares(ctx context.Context) {
	want := p.cfg.Spares.Providers()
	if len(want) == 0 {
		p.mu.Lock()
		none := len(p.spares) == 0
		p.mu.Unlock()
		if none {
			return // nothing to keep nor to discard: no repository is read
		}
	}
	repos := map[string]bool{}
	for _, r := range p.cfg.Spares.Repos(ctx) {
		if filepath.IsAbs(r) {
			repos[filepath.Clean(r)] = true
		}
	}
	type state struct{ head, setup string }
	states := map[string]state{}
	for r := range repos {
		head, err := p.cfg.Spares.Git.Head(ctx, r)
		if err != nil {
			p.logger.Debug("spares: repository head", "repo", r, "err", err)
			continue
		}
		setup, err := p.cfg.Spares.Git.SetupState(ctx, r)
		if err != nil {
			p.logger.Debug("spares: setup state", "repo", r, "err", err)
			continue
		}
		states[r] = state{head, setup}
	}
	var stale []*spare
	var reasons []string
	var make_ []spare
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	have := map[[2]string]int{}
	for _, sp := range p.spares {
		st, known := states[sp.repo]
		reason := ""
		switch {
		case !repos[sp.repo] || want[sp.agent] <= 0:
			reason = "no longer wanted"
		case sp.e != nil && sp.ready && (sp.e.state != StateIdle || p.entries[sp.e.key] != sp.e):
			reason = "its agent stopped"
		case !known:
			// The repository could not be read now: keep the spare; the
			// head is checked again at adoption.
		case st.head != sp.base:
			reason = "base moved"
		case st.setup != sp.setup:
			reason = "setup or its trust changed"
		}
		k := [2]string{sp.repo, sp.agent}
		if reason == "" && have[k] >= want[sp.agent] {
			reason = "more than wanted"
		}
		if reason != "" {
			stale = append(stale, sp)
			reasons = append(reasons, reason)
			continue
		}
		have[k]++
	}
	for _, sp := range stale {
		p.dropSpareLocked(sp)
	}
	free := p.spareSlotsLocked()
	repoList := make([]string, 0, len(states))
	for r := range states {
		repoList = append(repoList, r)
	}
	sort.Strings(repoList)
	agents := make([]string, 0, len(want))
	for a, n := range want {
		if n > 0 {
			agents = append(agents, a)
		}
	}
	sort.Strings(agents)
	// Round robin over (repo, agent), one spare each per round, so that
	// few slots are shared out.
	for round := 0; free > 0; round++ {
		added := false
		for _, r := range repoList {
			for _, a := range agents {
				if free == 0 || have[[2]string{r, a}]+round >= want[a] {
					continue
				}
				sp := &spare{id: SpareIDPrefix + strings.ToLower(rand.Text()[:12]), repo: r, agent: a,
					base: states[r].head, setup: states[r].setup, created: p.cfg.Now()}
				p.spares[sp.id] = sp
				make_ = append(make_, *sp)
				free--
				added = true
			}
		}
		if !added {
			break
		}
	}
	p.mu.Unlock()
	for i, sp := range stale {
		p.finishDrop(sp, reasons[i])
	}
	for i := range make_ {
		p.mu.Lock()
		sp := p.spares[make_[i].id]
		if p.closing || sp == nil {
			p.mu.Unlock()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.prepareSpare(sp)
		}()
	}
}

// spareSlotsLocked is how many more spares may start now: the free
// backend slots, less the spares being prepared (each will take one),
// and none while prompts wait for a slot.
func (p *Pool) spareSlotsLocked() int {
	if len(p.slots.waiters) > 0 {
		return 0
	}
	n := p.slots.reserved
	for _, e := range p.entries {
		if e.warmLocked() {
			n++
		}
	}
	for _, sp := range p.spares {
		if sp.e == nil {
			n++
		}
	}
	if free := p.cfg.MaxWarm - n; free > 0 {
		return free
	}
	return 0
}

// prepareSpare makes sp's worktree, runs its setup and starts its agent.
func (p *Pool) prepareSpare(sp *spare) {
	ctx := p.ctx
	fail := func(reason string) {
		p.mu.Lock()
		p.dropSpareLocked(sp)
		p.mu.Unlock()
		p.finishDrop(sp, reason)
	}
	spec, err := p.cfg.Resolver.Resolve(sp.agent)
	if err != nil {
		fail(fmt.Sprintf("agent %q: %v", sp.agent, err))
		return
	}
	wt, err := p.cfg.Worktrees.Create(ctx, sp.id, sp.repo, "")
	if err != nil {
		fail(fmt.Sprintf("create worktree: %v", err))
		return
	}
	p.mu.Lock()
	sp.wt = wt
	p.mu.Unlock()
	if wt.BaseCommit != sp.base {
		fail("base moved")
		return
	}
	var events []SetupEvent
	if err := p.cfg.Worktrees.RunSetup(ctx, wt, func(ev SetupEvent) { events = append(events, ev) }); err != nil {
		fail(fmt.Sprintf("setup: %v", err))
		return
	}
	// The first prompt's checkpoint is this one unless the worktree
	// changes: taken now, it costs the prompt nothing (as in warmUp).
	if _, err := p.cfg.Worktrees.Checkpoint(ctx, wt); err != nil {
		p.logger.Debug("spare: first checkpoint", "spare", sp.id, "err", err)
	}
	s := &session{id: sp.id, rec: SessionRecord{ID: sp.id, Repo: wt.Repo, ActiveAgent: sp.agent, Status: StatusOpen}, wt: wt, spare: true}
	s.feed = newSessionFeed(p.cfg.RingSize, p.cfg.RingBytes, 0, p.storedEvents(sp.id), &p.catchups)
	p.mu.Lock()
	if sp.gone || p.closing {
		p.mu.Unlock()
		fail("discarded while prepared")
		return
	}
	if err := p.freeSlotLocked(); err != nil {
		p.mu.Unlock()
		fail(fmt.Sprintf("no free backend slot: %v", err))
		return
	}
	sp.s, sp.setupEvents = s, events
	sp.e = p.startEntryLocked(s, sp.agent, spec, nil, 0, true)
	e := sp.e
	p.mu.Unlock()
	<-e.started
	p.mu.Lock()
	ok := e.err == nil && e.state == StateIdle && !sp.gone
	if ok {
		sp.ready = true
	}
	info := e.info
	p.mu.Unlock()
	if !ok {
		reason := "agent did not start"
		if e.err != nil {
			reason = e.err.Error()
		}
		fail(reason)
		return
	}
	p.spareEvent(sp, EventSpareReady, map[string]any{"pid": info.PID, "worktree": wt.Path})
}

// dropSpareLocked takes sp out of the pool's spares and marks its agent
// stopping; finishDrop, called after p.mu is released, stops it and
// removes its worktree.
func (p *Pool) dropSpareLocked(sp *spare) {
	if p.spares[sp.id] == sp {
		delete(p.spares, sp.id)
	}
	sp.gone = true
	if sp.e != nil && p.entries[sp.e.key] == sp.e && sp.e.state != StateStopped && sp.e.state != StateCrashed {
		sp.e.state = StateStopping
	}
}

// finishDrop stops a dropped spare's agent, removes its worktree and
// branch, and says so on the daemon's stream.
func (p *Pool) finishDrop(sp *spare, reason string) {
	ctx := context.WithoutCancel(p.ctx)
	p.mu.Lock()
	e, wt := sp.e, sp.wt
	if sp.wtTaken {
		wt = Worktree{}
	} else if wt.Path != "" {
		sp.wtTaken = true
	}
	announce := !sp.announced
	sp.announced = true
	p.mu.Unlock()
	if e != nil {
		p.stopEntry(ctx, e, "spare discarded: "+reason)
		p.mu.Lock()
		if p.entries[e.key] == e {
			delete(p.entries, e.key)
		}
		p.mu.Unlock()
	}
	if wt.Path != "" {
		if _, err := p.cfg.Worktrees.Remove(ctx, wt, true); err != nil {
			p.logger.Warn("remove a spare's worktree", "spare", sp.id, "err", err)
		}
	}
	if announce {
		p.logger.Info("spare discarded", "spare", sp.id, "repo", sp.repo, "agent", sp.agent, "reason", reason)
		p.spareEvent(sp, EventSpareDiscarded, map[string]any{"reason": reason})
	}
}

// spareEvent publishes a spare's event on the daemon-wide stream.
func (p *Pool) spareEvent(sp *spare, t backends.EventType, data map[string]any) {
	data["spare"] = sp.id
	data["repo"] = sp.repo
	data["base_commit"] = sp.base
	p.global.Publish(backends.Event{Time: p.cfg.Now(), Type: t, Session: sp.id, Agent: sp.agent, Data: backends.MustJSON(data)})
}

// evictSpareLocked drops one spare holding a backend slot, the one made
// last, for a session's agent; it reports whether there was one.
// finishDrop runs in the background.
func (p *Pool) evictSpareLocked(reason string) bool {
	var pick *spare
	for _, sp := range p.spares {
		if sp.e != nil && sp.e.warmLocked() && (pick == nil || sp.created.After(pick.created)) {
			pick = sp
		}
	}
	if pick == nil {
		return false
	}
	p.dropSpareLocked(pick)
	p.evictions.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.finishDrop(pick, reason)
	}()
	return true
}

// dropAllSpares discards every spare, for Shutdown.
func (p *Pool) dropAllSpares() {
	p.mu.Lock()
	all := make([]*spare, 0, len(p.spares))
	for _, sp := range p.spares {
		all = append(all, sp)
		p.dropSpareLocked(sp)
	}
	p.mu.Unlock()
	for _, sp := range all {
		p.finishDrop(sp, "shutdown")
	}
}
