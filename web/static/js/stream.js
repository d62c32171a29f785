// The live turn stream of one session. Events are queued as they arrive
// and applied in batches, once per animation frame and within a time
// budget, so a turn streaming thousands of events a second stays
// responsive. Applying an event only appends or updates the nodes it
// concerns: text chunks grow one text node, a tool update changes one
// card; the history already shown is never rendered again. Every piece of
// agent output is put into the page as text (text nodes, textContent).
import { h, put, relPath } from './dom.js';

// ANSI control sequences, stripped from terminal output shown as text.
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\r(?!\n)/g;

const STOP_CLASS = { end_turn: 'ok', cancelled: 'warn', refusal: 'warn', max_tokens: 'warn', max_turn_requests: 'warn', error: 'bad', timeout: 'bad' };
const TOOL_CLASS = { completed: 'ok', failed: 'bad', in_progress: 'info run', pending: '', cancelled: 'warn', interrupted: 'warn' };

/** promptShort is how many characters of a prompt its turn's head shows
 * before "Show all": its first line, at most this long. */
const promptShort = 160;

/** decisionText says in words how a permission request was decided: what
 * (allowed, rejected, cancelled) and by whom or why, from the data of a
 * permission.resolved event. */
export function decisionText(d) {
  if (d.cancelled) {
    const note = d.note || '';
    if (note === 'session cancelled') return 'cancelled with the turn';
    if (note.startsWith('request context ended')) return 'cancelled: the turn ended';
    if (note === 'permission broker closed') return 'cancelled: the daemon stopped';
    if (d.decided_by === 'policy') return 'cancelled: the agent offered no answer to choose';
    return 'cancelled';
  }
  const what = d.decision === 'allow' ? 'allowed' : d.decision === 'deny' ? 'rejected' : (d.decision || '?');
  const kind = d.option_kind && d.option_kind.endsWith('_always') ? ' always' : '';
  switch (d.decided_by) {
    case 'user': return `${what}${kind} by you`;
    case 'remembered': return `${what} — remembered from an earlier Always allow`;
    case 'policy': return `${what} by the provider's permission policy`;
    case 'timeout': return `${what}: no answer in time`;
    default: return d.decided_by ? `${what} (${d.decided_by})` : what;
  }
}

/** budgetMS bounds the work of one batch, so frames keep coming. */
const budgetMS = 10;

export class TurnStream {
  /** root is the scrolling container; hooks: onDiff(turn), onRestore(turn),
   * onAnswer(requestId). */
  constructor(root, hooks = {}) {
    this.root = root;
    this.hooks = hooks;
    this.queue = [];
    this.scheduled = false;
    this.turns = new Map();
    this.tools = new Map(); // turn/toolCallId → card
    this.perms = new Map(); // request id → line
    this.outside = null;    // container of the notes between turns
    this.running = 0;       // turn in progress, 0 if none
    this.lastTurn = 0;
    this.applied = 0;
    this.setup = null;      // the worktree's setup running: { el, sum, out }, null if none
    this.listeners = new Set();
    // A view at its end stays there when it gets shorter (the session's
    // head filling in above it, the composer growing), so a session opens
    // on its last turn's end, not cut above it.
    // Only the user scrolling up leaves the end: a view that got shorter
    // under a scroll event is still at its end for the ResizeObserver.
    this.atEnd = true;
    let lastTop = 0;
    root.addEventListener('scroll', () => {
      const top = root.scrollTop;
      if (root.scrollHeight - top - root.clientHeight < 48) this.atEnd = true;
      else if (top < lastTop) this.atEnd = false;
      lastTop = top;
    }, { passive: true });
    if (typeof ResizeObserver === 'function') {
      new ResizeObserver(() => { if (this.atEnd) root.scrollTop = root.scrollHeight; }).observe(root);
    }
  }

  /** push queues events; they show at the next frame. */
  push(...evs) {
    for (const ev of evs) this.queue.push(ev);
    this.schedule();
  }

  /** onState(fn) calls fn() after each batch that changed the running turn. */
  onState(fn) { this.listeners.add(fn); }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const run = () => { this.scheduled = false; this.flush(); };
    if (document.hidden) setTimeout(run, 250);
    else requestAnimationFrame(run);
  }

  flush() {
    const r = this.root;
    const atBottom = this.atEnd || r.scrollHeight - r.scrollTop - r.clientHeight < 48;
    const start = performance.now();
    const before = this.running;
    const setupBefore = !!this.setup;
    let i = 0;
    const q = this.queue;
    while (i < q.length) {
      this.apply(q[i++]);
      if ((i & 63) === 0 && performance.now() - start > budgetMS) break;
    }
    q.splice(0, i);
    this.applied += i;
    if (atBottom) r.scrollTop = r.scrollHeight;
    if (q.length) this.schedule();
    if (before !== this.running || setupBefore !== !!this.setup || i) for (const fn of this.listeners) fn();
  }

  /** turnEl returns the section of turn n, making it when needed. */
  turnEl(n, agent) {
    let t = this.turns.get(n);
    if (t) return t;
    const prompt = h('div.prompt');
    const more = h('button.small.ghost.more', { type: 'button', 'data-expand': '', hidden: true, onclick: () => this.expand(t) });
    const agentEl = h('span.badge.plain', agent || '');
    const head = h('div.turn-head', h('span.n', `#${n}`), h('div.prompt-box', prompt, more), agentEl);
    const body = h('div.turn-body');
    const foot = h('div.turn-foot', h('span.badge.info.run', 'running'));
    const el = h('section.turn', { 'data-turn': n }, head, body, foot);
    this.root.appendChild(el);
    this.outside = null;
    t = { n, el, head, prompt, more, agentEl, body, foot, text: null, role: '', pty: null, plan: null, usage: null, full: '', expanded: false };
    this.turns.set(n, t);
    this.lastTurn = Math.max(this.lastTurn, n);
    return t;
  }

  /** setPrompt shows prompt text in turn t's head: its first line, cut
   * at promptShort characters, with a button that shows all of it (the
   * CLI cuts it too; a pasted 100 KB prompt is no head). */
  setPrompt(t, text) {
    t.full = text;
    t.expanded = false;
    this.showPrompt(t);
  }

  showPrompt(t) {
    const text = t.full;
    const first = text.split('\n')[0];
    const cut = first.length > promptShort ? first.slice(0, promptShort).replace(/\s+\S*$/, '') : first;
    const short = cut.length < text.trimEnd().length;
    t.prompt.textContent = t.expanded || !short ? text : cut + ' …';
    t.more.hidden = !short;
    t.more.textContent = t.expanded ? 'Show less' : `Show all (${text.length.toLocaleString()} characters)`;
    t.head.classList.toggle('expanded', t.expanded);
  }

  /** expand shows all of turn t's prompt, or its first line again. */
  expand(t) {
    t.expanded = !t.expanded;
    this.showPrompt(t);
    if (!t.expanded && t.head.getBoundingClientRect().top < this.root.getBoundingClientRect().top) {
      t.el.scrollIntoView({ block: 'start' });
    }
  }

  /** note adds a line outside any turn (agent life cycle, session notes). */
  note(text, bad) {
    const run = this.running && this.turns.get(this.running);
    if (run) { // the agent starting for a turn belongs to that turn
      run.text = null;
      run.body.appendChild(h('div.sys', { class: bad ? 'bad' : '' }, text));
      return;
    }
    if (!this.outside) {
      this.outside = h('div.outside');
      this.root.appendChild(this.outside);
    }
    this.outside.appendChild(h('div.sys', { class: bad ? 'bad' : '' }, text));
  }

  /** where returns the body to write an event of turn n into, or null for
   * notes outside turns. */
  where(ev) {
    return ev.turn ? this.turnEl(ev.turn, ev.agent) : null;
  }

  line(ev, text, cls = '') {
    const t = this.where(ev);
    if (!t) return this.note(text, cls === 'bad');
    t.text = null;
    t.body.appendChild(h('div.sys', { class: cls }, text));
  }

  apply(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'turn.started': {
        const t = this.turnEl(d.turn || ev.turn, d.agent || ev.agent);
        this.setPrompt(t, d.prompt || '');
        t.agentEl.textContent = d.agent || ev.agent || '';
        this.running = t.n;
        break;
      }
      case 'message.chunk': this.chunk(ev, d); break;
      case 'tool.call':
      case 'tool.update': this.tool(ev, d); break;
      case 'plan': this.plan(ev, d); break;
      case 'usage': {
        const t = this.where(ev);
        if (t) t.usage = d;
        break;
      }
      case 'permission.requested': this.permAsked(ev, d); break;
      case 'permission.resolved': this.permDone(ev, d); break;
      case 'fs.read':
      case 'fs.write': {
        const verb = ev.type === 'fs.read' ? 'read' : 'wrote';
        const fail = d.outcome && d.outcome !== 'ok' && d.outcome !== 'allowed';
        const path = relPath(this.hooks.root ? this.hooks.root() : '', d.path || '');
        this.line(ev, `${fail ? 'could not ' + (verb === 'read' ? 'read' : 'write') : verb} ${path}${d.error ? ': ' + d.error : ''}`, fail ? 'bad' : '');
        break;
      }
      case 'terminal.created':
        this.line(ev, `$ ${[d.command, ...(d.args || [])].filter(Boolean).join(' ')}`);
        break;
      case 'terminal.exited':
        this.line(ev, `terminal exited${d.exit_code != null ? ' with ' + d.exit_code : ''}`);
        break;
      case 'pty.output': this.ptyText(ev, d.data || ''); break;
      case 'error': this.line(ev, `error: ${d.error || JSON.stringify(d)}`, 'bad'); break;
      // A turn the budget cancelled says it at its end; this is one whose tokens crossed it.
      case 'budget.exceeded': if (!d.cancelled) this.line(ev, d.message || 'budget exceeded', 'bad'); break;
      // A number the agent reported out of bounds: not stored nor counted.
      case 'usage.dropped': this.line(ev, `dropped ${d.dropped} ${d.value} the agent reported: ${d.reason}`, 'bad'); break;
      case 'sandbox.refused': {
        const say = (what, n) => `sandbox ${what} ${n.entry || 'command'} ${n.path}: ${n.reason}${n.fix ? '\n  ' + n.fix : ''}`;
        const lines = [...(d.refused || []).map(n => say('refused', n)), ...(d.denied || []).map(n => say('denied', n))];
        this.line(ev, lines.join('\n'), 'bad');
        break;
      }
      case 'network.refused': {
        const target = `${(d.host || '').includes(':') ? `[${d.host}]` : d.host}:${d.port}`;
        const allow = d.allow ? `\n  allow it with "sandbox.network": [..., ${JSON.stringify(d.allow)}]` : '';
        this.line(ev, `network refused: ${target} (${d.reason || 'refused'})${allow}`, 'bad');
        break;
      }
      case 'turn.ended': this.ended(ev, d); break;
      case 'turn.briefing': this.briefing(ev, d); break;
      case 'agent.starting': this.note(`starting ${ev.agent}…`); break;
      case 'agent.ready': this.note(`${ev.agent} ready${d.pid ? ' (pid ' + d.pid + ')' : ''}${d.resumed ? ', resumed its conversation' : ''}`); break;
      case 'agent.exited': this.note(`${ev.agent} exited (${d.status || '?'})${d.stderr_tail ? '\n' + d.stderr_tail : ''}`, !d.expected); break;
      case 'agent.evicted': this.note(`${ev.agent} stopped: ${d.reason || ''}`); break;
      case 'mcp': {
        const skipped = (d.skipped || []).map(s => `${s.name} (${s.transport}): ${s.reason}`);
        this.note(`${ev.agent} got MCP servers: ${(d.servers || []).join(', ') || 'none'}${skipped.length ? '; not ' + skipped.join('; ') : ''}`, skipped.length > 0);
        break;
      }
      case 'agent.context_lost': this.note(`${ev.agent} could not resume its conversation and starts a new one`); break;
      case 'agent.slowed': this.note(`${ev.agent}: ${d.message || 'the agent is being slowed'}`); break;
      case 'session.created': this.note(d.forked_from ? `session created as a fork of ${d.forked_from}` : 'session created'); break;
      case 'session.forked': this.note(`forked from ${d.from} ${d.turn ? `at turn ${d.turn}` : 'as it was then'} (its history above: ${d.turns || 0} turn${d.turns === 1 ? '' : 's'})`); break;
      case 'session.closed': this.note('session closed'); break;
      case 'session.moved': {
        const cut = (d.interrupted_turns || []).length ? `; turn ${d.interrupted_turns.join(', ')} was interrupted` : '';
        this.note(`session moved from host ${d.from} to ${d.to} (${d.reason})${cut}${d.lost ? '. ' + d.lost : ''}`, !!d.lost);
        break;
      }
      case 'worktree.restored': this.note(`worktree restored to ${d.after ? 'after' : 'before'} turn ${d.turn}`); break;
      case 'setup.started': this.setupStarted(d); break;
      case 'setup.output': this.setupOutput(d); break;
      case 'setup.ended': this.setupEnded(d); break;
      case 'setup.untrusted': this.note(`setup skipped: ${d.file || '.agentpool.json'} is not trusted; nothing was copied or run`); break;
      case 'setup.copied': if ((d.copied || []).length) this.note(`setup copied ${d.copied.length} file${d.copied.length === 1 ? '' : 's'} from the main checkout`); break;
      default: break; // history, mode, config, commands, session.info: not part of the conversation
    }
  }

  /** briefing shows the pool's briefing that went with a turn's prompt,
   * folded: a summary line with its size, the text inside. */
  briefing(ev, d) {
    const t = this.where(ev);
    const ids = d.turns || [];
    const span = ids.length === 1 ? `turn ${ids[0]}` : ids.length ? `turns ${ids[0]}–${ids[ids.length - 1]}` : 'no turn';
    const size = d.bytes < 1024 ? `${d.bytes} B` : `${(d.bytes / 1024).toFixed(1)} KiB`;
    const what = d.kind === 'since' ? `since its turn ${d.since}` : 'full history';
    const cut = (d.cut || []).length ? `, ${d.cut.length} older cut` : '';
    const sum = h('summary', `Briefing for ${d.agent || ev.agent} (${what}): ${span}${cut} · ${size} · sent as ${d.delivery || '?'}`);
    const el = h('details.briefing', { 'data-turn': String(ev.turn || '') }, sum, h('pre.briefing-text', d.text || ''));
    if (!t) { this.placeNote(el); return; }
    t.text = null;
    t.body.appendChild(el);
  }

  /** setupStarted shows the worktree's setup running, its output in a
   * collapsed block; prompts wait for it. */
  setupStarted(d) {
    const cmd = (d.command || []).join(' ');
    const sum = h('summary', `setup running: ${cmd}…`);
    const out = document.createTextNode('');
    const el = h('details.setup', { 'data-setup': 'running' }, sum, h('pre.setup-out', out));
    this.placeNote(el);
    this.setup = { el, sum, out, cmd };
  }

  setupOutput(d) {
    if (!this.setup || !d.output) return;
    const out = this.setup.out;
    out.appendData(d.output.replace(ANSI, ''));
    if (out.length > 100000) out.deleteData(0, out.length - 80000);
  }

  /** setupEnded shows how the setup ended: ok with its time, or a failure
   * as an error line with the exit code and the last lines of output. */
  setupEnded(d) {
    const s = this.setup || { cmd: '' };
    this.setup = null;
    const took = d.elapsed_ns ? ` in ${(d.elapsed_ns / 1e9).toFixed(1)} s` : '';
    if (s.el) s.el.dataset.setup = d.ok ? 'ok' : 'failed';
    if (d.ok) {
      if (s.sum) s.sum.textContent = `setup ok${took}: ${s.cmd}`;
      return;
    }
    if (s.sum) s.sum.textContent = `setup failed${took}: ${s.cmd}`;
    const code = d.exit_code != null ? ` with exit code ${d.exit_code}` : '';
    const tail = (d.tail || []).slice(-10).join('\n');
    this.placeNote(h('div.sys.bad.setup-failed', `setup failed${took}${code || (d.error ? ': ' + d.error : '')}${tail ? '\n' + tail : ''}`));
  }

  /** placeNote puts el where note puts a line. */
  placeNote(el) {
    const run = this.running && this.turns.get(this.running);
    if (run) { run.text = null; run.body.appendChild(el); return; }
    if (!this.outside) {
      this.outside = h('div.outside');
      this.root.appendChild(this.outside);
    }
    this.outside.appendChild(el);
  }

  chunk(ev, d) {
    // An agent's echo of a user message (user_echo; "user" in older logs)
    // is the agent's words: the user's own are the prompt in the turn's head.
    if (d.role === 'user_echo' || d.role === 'user') return;
    let text = d.text;
    if (!text && d.content) text = `[${d.content.type || 'content'}]`;
    if (!text) return;
    const t = this.where(ev);
    if (!t) return this.note(text);
    if (t.text && t.role === d.role && t.text.parentNode && t.body.lastChild === t.text.parentNode) {
      t.text.appendData(text);
      return;
    }
    const node = document.createTextNode(text);
    t.body.appendChild(h('div.msg', { class: d.role === 'thought' ? 'thought' : 'agent' }, node));
    t.text = node;
    t.role = d.role;
  }

  ptyText(ev, s) {
    const t = this.where(ev);
    const text = s.replace(ANSI, '');
    if (!t || !text) return;
    if (!t.pty || t.body.lastChild !== t.pty.parentNode) {
      t.pty = document.createTextNode('');
      t.body.appendChild(h('div.msg.pty', t.pty));
      t.text = null;
    }
    t.pty.appendData(text);
    if (t.pty.length > 200000) t.pty.deleteData(0, t.pty.length - 150000);
  }

  tool(ev, d) {
    // A tool call lives in its turn: an agent may use the same id again
    // in a later turn (the demo agent does) for a new call.
    const id = `${ev.turn || 0}/${d.toolCallId || d.tool_call_id || ''}`;
    let c = this.tools.get(id);
    if (!c) {
      const t = this.where(ev);
      if (!t) return;
      t.text = null;
      c = { kind: h('span.kind'), title: h('span.title'), status: h('span.badge'), locs: h('div.locs') };
      c.el = h('div.tool', c.kind, c.title, c.status, c.locs);
      t.body.appendChild(c.el);
      this.tools.set(id, c);
    }
    if (d.kind) c.kind.textContent = d.kind;
    if (d.title) c.title.textContent = d.title;
    if (d.status) {
      c.status.textContent = d.status.replace('_', ' ');
      c.status.className = 'badge ' + (TOOL_CLASS[d.status] || '');
      c.status.dataset.status = d.status;
      c.status.title = '';
    }
    if (Array.isArray(d.locations) && d.locations.length) {
      const root = this.hooks.root ? this.hooks.root() : '';
      c.locs.textContent = d.locations.map(l => relPath(root, l)).join('  ');
    }
  }

  plan(ev, d) {
    const t = this.where(ev);
    if (!t) return;
    if (!t.plan || !t.plan.isConnected) {
      t.text = null;
      t.plan = h('div.plan');
      t.body.appendChild(t.plan);
    }
    const items = (d.entries || []).map(e => h('li', { class: e.status || '' }, e.content || ''));
    put(t.plan, h('strong', 'Plan'), h('ol', items));
  }

  permAsked(ev, d) {
    const t = this.where(ev);
    const text = `Asks permission: ${d.title || d.action || d.kind || 'an action'}${d.risk ? ' · risk ' + d.risk : ''}`;
    const btn = h('button.small', { type: 'button', onclick: () => this.hooks.onAnswer && this.hooks.onAnswer(d.request) }, 'Answer…');
    const el = h('div.perm-line', h('span', text), ' ', btn);
    if (t) { t.text = null; t.body.appendChild(el); } else this.note(text);
    this.perms.set(d.request, { el, btn });
  }

  permDone(ev, d) {
    const p = this.perms.get(d.request);
    const what = decisionText(d);
    if (p) {
      p.btn.remove();
      p.el.classList.add('done');
      p.el.appendChild(document.createTextNode(` → ${what}`));
    } else {
      // Decided without asking: no request line to end, so one line that
      // names what was asked.
      const asked = d.title || d.action || d.kind || 'an action';
      this.line(ev, `Permission for ${asked}: ${what}`);
    }
  }

  ended(ev, d) {
    const n = d.turn || ev.turn;
    const t = this.turnEl(n, d.agent || ev.agent);
    t.text = null;
    const stop = d.stop_reason || 'ended';
    const parts = [h('span.badge', { class: STOP_CLASS[stop] || '' }, stop.replace(/_/g, ' '))];
    if (d.duration_ms != null) parts.push(h('span', `${(d.duration_ms / 1000).toFixed(1)} s`));
    const c = d.changes;
    if (c && c.files) parts.push(h('span', `${c.files} file${c.files === 1 ? '' : 's'} changed (+${c.additions} −${c.deletions})`));
    const hid = d.hidden;
    if (hid && hid.count) {
      const first = (hid.files || [])[0];
      parts.push(h('span.badge.warn', { title: first ? `${first.path} hidden by ${first.rule}` : '' },
        `${hid.count} hidden by changed ignore rules`));
    }
    const hist = d.history;
    if (hist && hist.refused) {
      parts.push(h('span.badge.warn', { title: `${hist.refused}${hist.detail ? ` (${hist.detail})` : ''}; the agent's files are in the checkpoint` },
        'agent\'s commits not taken'));
    } else if (hist && hist.commits) {
      parts.push(h('span', `${hist.commits} commit${hist.commits === 1 ? '' : 's'} of the agent's`));
    }
    for (const u of [d.usage, t.usage]) if (u) parts.push(h('span.usage', usageText(u)));
    parts.push(h('span.spacer'));
    if (c && c.files && this.hooks.onDiff) parts.push(h('button.small', { type: 'button', onclick: () => this.hooks.onDiff(n) }, 'View changes'));
    if (this.hooks.onRestore) parts.push(h('button.small', { type: 'button', onclick: () => this.hooks.onRestore(n) }, 'Restore to before this turn'));
    put(t.foot, ...parts);
    this.endTools(n, stop);
    if (d.error) t.body.appendChild(h('div.sys.bad', d.error));
    if (hist && hist.refused) {
      t.body.appendChild(h('div.sys.bad', `The agent's own commits were not taken onto the session branch: ${hist.refused}` +
        `${hist.detail ? ` (${hist.detail})` : ''}. Its files are in the turn's checkpoint.`));
    }
    if (this.running === n) this.running = 0;
  }

  /** endTools marks the tool calls of turn n that had not finished when
   * it ended: cancelled with a cancelled turn, interrupted otherwise (the
   * agent or the daemon stopped). An update the agent sends later still
   * shows. */
  endTools(n, stop) {
    const prefix = `${n}/`;
    const status = stop === 'cancelled' ? 'cancelled' : 'interrupted';
    for (const [id, c] of this.tools) {
      if (!id.startsWith(prefix)) continue;
      const st = c.status.dataset.status || '';
      if (st && st !== 'pending' && st !== 'in_progress') continue;
      c.status.textContent = status;
      c.status.className = 'badge ' + TOOL_CLASS[status];
      c.status.dataset.status = status;
      c.status.title = stop === 'cancelled' ? 'the turn was cancelled before this call finished' : 'the turn ended before this call finished';
    }
  }
}

/** usageText is a usage payload in a few words: the prompt answer's
 * tokens, or a usage_update's context window and cost so far. */
function usageText(u) {
  if (typeof u !== 'object' || !u) return String(u);
  if ('inputTokens' in u || 'outputTokens' in u || 'totalTokens' in u) {
    const total = u.totalTokens || (u.inputTokens || 0) + (u.outputTokens || 0) + (u.thoughtTokens || 0);
    const bits = [`in ${u.inputTokens || 0}`, `out ${u.outputTokens || 0}`];
    if (u.cachedReadTokens) bits.push(`cached ${u.cachedReadTokens}`);
    if (u.thoughtTokens) bits.push(`thought ${u.thoughtTokens}`);
    return `${total} tokens (${bits.join(' · ')})`;
  }
  const out = [];
  if (u.size) out.push(`context ${u.used || 0} of ${u.size}`);
  if (u.cost && typeof u.cost === 'object') out.push(`cost so far ${u.cost.amount} ${u.cost.currency || ''}`.trim());
  if (out.length) return out.join(' · ');
  for (const [k, v] of Object.entries(u)) {
    if (k === 'sessionUpdate') continue;
    if (typeof v === 'number' || typeof v === 'string') out.push(`${k} ${v}`);
  }
  return out.slice(0, 5).join(' · ');
}
