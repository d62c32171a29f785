// One session: the live turn stream with its composer, the changes of
// each turn with restore, the permission and file audit, and the
// terminal of a terminal agent.
import { h, ago, toast, confirmDialog, put } from './dom.js';
import { mergeFlow } from './merge.js';
import { forkFlow } from './fork.js';
import * as API from './api.js';
import { store, on, sessionStatus, pendingOf, addPending, removePending, permFromEvent, refreshSessions } from './store.js';
import { TurnStream, decisionText } from './stream.js';
import { openStream } from './sse.js';
import { agentChips, agentPicker, fillPicker, closeSessionFlow } from './sessions.js';
import { openApproval, showing, wasDismissed, closeApproval } from './approval.js';
import { trustNotice } from './trust.js';
import { agentControls } from './agentconfig.js';
import { usageBox } from './usage.js';
import { reviewDiff, reviewResult, shipBox } from './review.js';

/** sessionView renders session id into main; it returns its cleanup. */
export function sessionView(main, id) {
  let sess = store.sessions.get(id) || null;
  let tab = 'conversation';
  let es = null;
  let lastSeq = 0;
  let ended = false;
  let shownRunning = -1;
  let shownSetup = false;
  const audit = [];
  const asked = new Map(); // permission request id → its title, for the audit
  const cleanups = [];

  // Head
  const title = h('h1');
  const status = h('span.badge');
  const meta = h('div.meta');
  const agents = h('div.row');
  const mcp = h('div.meta.mcp');
  const closeBtn = h('button.danger', { type: 'button', onclick: async () => {
    if (sess && await closeSessionFlow(sess)) location.hash = '#/';
  } }, 'Close session');
  const mergeBox = h('div.merge-box');
  const usage = usageBox(id);
  const mergeBtn = h('button', { type: 'button', 'data-merge-open': '', title: 'Merge the session\'s branch into its base (asks first)', onclick: () => {
    if (sess) mergeFlow(sess, mergeBox, () => { refreshSoon(); changes.reload(); });
  } }, 'Merge');
  const forkBtn = h('button', { type: 'button', 'data-fork-open': '', title: 'A new session from this one: its files now (uncommitted too) or at a turn, and its history (asks first)', onclick: () => {
    if (sess) forkFlow(sess, mergeBox, sess.last_turn || 0);
  } }, 'Fork');
  const tabs = {
    conversation: h('button', { type: 'button', onclick: () => show('conversation') }, 'Conversation'),
    changes: h('button', { type: 'button', onclick: () => show('changes') }, 'Changes'),
    audit: h('button', { type: 'button', onclick: () => show('audit') }, 'Audit', h('span.count', '0')),
    terminal: h('button', { type: 'button', hidden: true, onclick: () => show('terminal') }, 'Terminal'),
  };

  // Conversation
  const streamEl = h('div.stream', { 'aria-live': 'off' });
  const stream = new TurnStream(streamEl, {
    onDiff: n => { show('changes'); changes.select(n); },
    onRestore: n => restoreFlow(n, false),
    root: () => (sess && sess.worktree ? sess.worktree.path : ''),
    onAnswer: req => { const p = pendingOf(id).find(x => x.id === req); if (p) openApproval(p); else toast('That request is no longer pending.'); },
  });
  // A phone's one-line box has room for the short placeholder only.
  const text = h('textarea', { name: 'prompt', rows: 2, title: 'Enter sends, Shift+Enter for a new line',
    placeholder: matchMedia('(max-width: 720px)').matches ? 'Ask the agent…' : 'Ask the agent… (Enter sends, Shift+Enter for a new line)' });
  const picker = agentPicker(sess ? sess.active_agent : '');
  const ctl = agentControls(id, text, () => picker.value || (sess ? sess.active_agent : ''));
  let ctlAgent = picker.value;
  picker.addEventListener('change', () => { ctlAgent = picker.value; ctl.agentChanged(); });
  cleanups.push(() => ctl.close());
  const send = h('button.primary', { type: 'submit' }, 'Send');
  const cancelBtn = h('button.danger', { type: 'button', onclick: () => doCancel() }, 'Cancel turn');
  const retryBtn = h('button', { type: 'button', title: 'Send the last prompt again', onclick: () => doRetry() }, 'Retry', h('span.long', ' last turn'));
  const state = h('span.state');
  const composer = h('form.composer', { onsubmit: e => { e.preventDefault(); doSend(); } }, ctl.menu, text,
    h('div.row', h('label.row.muted', 'Agent', picker), ctl.el, state, h('span.spacer'), retryBtn, cancelBtn, send));
  text.addEventListener('keydown', e => {
    if (ctl.handleKey(e)) return;
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); doSend(); }
  });
  const convo = h('div.tab-body', streamEl, composer);

  const changes = changesPanel(id, (n, after) => restoreFlow(n, after),
    { open: () => !!sess && sess.status !== 'closed', onReview: () => { changes.stale(); show('conversation'); } });
  const ship = h('div.ship-box');
  const rememberedEl = h('div.remembered-box');
  const auditEl = h('div.tab-body', rememberedEl, h('div.stream'));
  const termEl = h('div.tab-body');
  let term = null;

  // On a phone the session's details (paths, agents, usage, pull
  // request) fold away behind a button, so the conversation gets the
  // screen; a desktop shows them always (the button is hidden there).
  const more = h('div.head-more', { id: `more-${id}` }, meta, agents, mcp, usage.el, ship);
  const detailsBtn = h('button.small.details-toggle', { type: 'button', 'data-details': '', 'aria-expanded': 'false', 'aria-controls': more.id,
    onclick: () => {
      const open = head.classList.toggle('open');
      detailsBtn.setAttribute('aria-expanded', String(open));
      detailsBtn.textContent = open ? 'Details ▴' : 'Details ▾';
    } }, 'Details ▾');
  const head = h('div.session-head',
    h('div.row', h('a', { href: '#/' }, '← Sessions'), detailsBtn, h('span.spacer'), forkBtn, mergeBtn, closeBtn),
    h('div.row.title-row', title, status),
    more, mergeBox, trustNotice(id),
    h('div.tabs', { role: 'tablist' }, Object.values(tabs)));
  put(main, h('div.session', head, convo, changes.el, auditEl, termEl));

  // closedWith is what closing the session did with its work (the data of
  // its session.closed event: worktree, a RemoveResult, and discard).
  let closedWith = null;

  /** branchMeta is the branch of the head's meta line: of a closed
   * session, whether it was kept (and at which commit) or deleted. */
  function branchMeta(branch, closed) {
    if (!closed) return h('span', { 'data-branch': 'present' }, 'branch ', h('span.mono', branch || '—'));
    const res = (closedWith && closedWith.worktree) || null;
    if (!res) return h('span', { 'data-branch': 'unknown' }, 'branch ', h('span.mono', branch || '—'), ' (kept, unless closing discarded the work or found none)');
    if (res.discarded || res.branch_deleted) {
      return h('span', { 'data-branch': 'deleted', title: res.discarded ? 'the work was discarded when the session closed' : 'the session left no work, so its branch was deleted' },
        'branch ', h('s.mono', res.branch || branch || '—'), res.discarded ? ' deleted (work discarded)' : ' deleted (no work)');
    }
    return h('span', { 'data-branch': 'kept' }, 'branch ', h('span.mono', res.branch || branch || '—'),
      res.commit ? ` kept at ${res.commit.slice(0, 10)}` : ' kept');
  }

  function renderHead() {
    if (!sess) {
      title.textContent = id;
      return;
    }
    title.textContent = sess.title || sess.id;
    title.classList.toggle('sid', !sess.title);
    // The stream knows first whether a turn runs; the list catches up.
    let st = sessionStatus(stream.applied ? { ...sess, busy: running() > 0 } : sess);
    if (stream.setup && st.key === 'idle') st = { key: 'setup', label: 'setup running…', cls: 'info run' };
    status.textContent = st.label;
    status.className = 'badge ' + st.cls;
    status.dataset.status = st.key;
    const wt = sess.worktree || {};
    const closed = sess.status === 'closed';
    put(meta, 
      h('span', 'repo ', h('span.mono', sess.repo)),
      branchMeta(wt.branch, closed),
      sess.base_ref ? h('span', 'from ', h('span.mono', sess.base_ref)) : null,
      closed ? h('span', { title: wt.path || '', 'data-worktree': 'removed' }, 'worktree ', h('s.mono', wt.path || '—'), ' removed')
        : h('span', { title: wt.path || '', 'data-worktree': 'present' }, 'worktree ', h('span.mono', wt.path || '—')),
      sess.title ? h('span', 'id ', h('span.mono.sid', sess.id)) : null,
      sess.host ? h('span', { 'data-host': sess.host, title: 'the host of the pool that runs this session' }, 'host ', h('span.mono', sess.host)) : null);
    put(agents, agentChips(sess));
    put(mcp, mcpView(sess));
    mcp.hidden = !mcp.firstChild;
    usage.render(sess);
    if (ship.dataset.for !== `${sess.id} ${sess.pr_url || ''}`) { // keeps an open <details> open
      ship.dataset.for = `${sess.id} ${sess.pr_url || ''}`;
      put(ship, shipBox(sess));
    }
    closeBtn.hidden = closed;
    mergeBtn.hidden = closed;
    forkBtn.hidden = closed;
    composer.hidden = closed;
    tabs.terminal.hidden = !ptyAgent();
    fillPicker(picker, sess.active_agent);
    if (picker.value !== ctlAgent) { ctlAgent = picker.value; ctl.agentChanged(); }
    renderComposer();
  }

  function ptyAgent() {
    const provs = (store.providers && store.providers.providers) || [];
    const kindOf = a => (provs.find(p => p.id === a) || {}).kind;
    if (sess && kindOf(sess.active_agent) === 'pty') return sess.active_agent;
    const a = ((sess && sess.agents) || []).find(x => x.kind === 'pty');
    return a ? a.agent : '';
  }

  function running() { return stream.running || (sess && sess.busy && !stream.applied ? sess.turn : 0); }

  function renderComposer() {
    const r = running();
    if (sess && (r !== shownRunning || !!stream.setup !== shownSetup)) { shownRunning = r; shownSetup = !!stream.setup; renderHead(); return; }
    cancelBtn.hidden = !r;
    send.disabled = !!r;
    retryBtn.hidden = !!r || !stream.lastTurn;
    state.textContent = r ? `turn ${r} running…` : stream.setup ? 'setup running… a prompt sent now starts when it ends' : '';
  }

  function show(name) {
    tab = name;
    for (const [k, b] of Object.entries(tabs)) {
      b.classList.toggle('active', k === name);
      b.setAttribute('aria-selected', String(k === name));
    }
    convo.hidden = name !== 'conversation';
    changes.el.hidden = name !== 'changes';
    auditEl.hidden = name !== 'audit';
    termEl.hidden = name !== 'terminal';
    if (name === 'changes') changes.load();
    if (name === 'audit') renderAudit();
    if (name === 'terminal' && !term) {
      import('./terminal.js').then(m => { term = m.terminalPanel(termEl, id, ptyAgent()); cleanups.push(() => term.close()); })
        .catch(e => put(termEl, h('div.pad.error-text', `The terminal could not load: ${e.message}`)));
    }
    if (name === 'conversation') { streamEl.scrollTop = streamEl.scrollHeight; text.focus({ preventScroll: true }); }
  }

  async function doSend() {
    const t = text.value.trim();
    if (!t || running()) return;
    send.disabled = true;
    try {
      await API.prompt(id, t, picker.value);
      text.value = '';
    } catch (e) {
      toast(`Prompt refused: ${e.message}`, true);
    } finally {
      renderComposer();
    }
  }

  async function doCancel() {
    cancelBtn.disabled = true;
    try { await API.cancel(id); } catch (e) { toast(`Cancel failed: ${e.message}`, true); }
    cancelBtn.disabled = false;
  }

  async function doRetry() {
    retryBtn.disabled = true;
    try { await API.retry(id); } catch (e) { toast(`Retry refused: ${e.message}`, true); }
    retryBtn.disabled = false;
  }

  async function restoreFlow(n, after) {
    const ok = await confirmDialog(`Restore to ${after ? 'after' : 'before'} turn ${n}?`,
      [h('p.flush', `The worktree's files are put back as they were ${after ? 'when turn ' + n + ' ended' : 'just before turn ' + n + ' started'}. ` +
        'Changes made since are replaced; the checkpoints of every turn stay, so you can restore another turn afterwards.')],
      [{ label: 'Restore', class: 'primary', value: () => true }]);
    if (!ok) return;
    try {
      await API.restore(id, n, after);
      toast(`Worktree restored to ${after ? 'after' : 'before'} turn ${n}.`);
      changes.reload();
    } catch (e) {
      toast(`Restore failed: ${e.message}`, true);
    }
  }

  // Audit: the permission decisions and the agent's file and terminal
  // use, from the session's own events.
  function noteAudit(ev) {
    const d = ev.data || {};
    let row = null;
    switch (ev.type) {
      case 'permission.requested': if (d.title) asked.set(d.request, d.title); row = ['asked', d.kind || d.action || '', d.title || '', d.risk || '', '']; break;
      case 'permission.resolved': row = [d.cancelled ? 'cancelled' : d.decision === 'allow' ? 'allowed' : d.decision === 'deny' ? 'rejected' : d.decision || '',
        d.action || '', asked.get(d.request) || d.title || `a request to ${d.action || d.kind || 'act'}`, d.risk || '', auditDetail(d)]; break;
      case 'fs.read': case 'fs.write': row = [ev.type === 'fs.read' ? 'read' : 'write', ev.type, d.path || '', '', `${d.outcome || ''}${d.bytes ? ' · ' + d.bytes + ' B' : ''}${d.error ? ' · ' + d.error : ''}`]; break;
      case 'terminal.created': row = ['terminal', 'execute', [d.command, ...(d.args || [])].filter(Boolean).join(' '), '', '']; break;
      case 'network.refused': row = ['refused', 'network', `${(d.host || '').includes(':') ? `[${d.host}]` : d.host}:${d.port}`, '', `${d.reason || ''}${d.allow ? ` · add "${d.allow}" to sandbox.network to allow it` : ''}`]; break;
      default: return;
    }
    audit.push({ time: ev.time, agent: ev.agent, turn: ev.turn, row });
    tabs.audit.lastChild.textContent = String(audit.length);
    if (tab === 'audit') scheduleAudit();
  }
  let auditTimer = 0;
  function scheduleAudit() { clearTimeout(auditTimer); auditTimer = setTimeout(renderAudit, 100); }
  function renderAudit() {
    loadRemembered();
    const box = auditEl.lastChild;
    if (!audit.length) {
      put(box, h('div.empty', 'No permission requests, file access, terminals or refused connections yet.'));
      return;
    }
    put(box, h('div.panel', h('table.list.cards',
      h('thead', h('tr', h('th', 'Time'), h('th', 'Agent'), h('th.wide', 'Turn'), h('th', 'What'), h('th', 'Kind'), h('th', 'Subject'), h('th.wide', 'Risk'), h('th', 'Detail'))),
      h('tbody', audit.map(a => h('tr', h('td.mono', new Date(a.time).toLocaleTimeString()), h('td', a.agent || ''), h('td.wide', a.turn ? String(a.turn) : ''),
        h('td', h('strong', a.row[0])), h('td.mono', a.row[1]), h('td.mono.subject', a.row[2]), h('td.wide', a.row[3]), h('td.muted.subject', a.row[4])))))));
  }

  // The answers the session remembers ("Always allow in this session",
  // "Always reject"), kept with it until it closes, and a button that
  // takes them back.
  async function loadRemembered() {
    let list;
    try { list = await API.remembered(id); } catch { put(rememberedEl); return; }
    if (!list || !list.length) { put(rememberedEl); return; }
    const word = k => k === 'allow_always' ? 'Always allow' : k === 'reject_always' ? 'Always reject' : k;
    put(rememberedEl, h('div.panel.padded',
      h('div.row', h('strong', 'Remembered answers'), h('span.muted', 'answered without asking, until the session closes'), h('span.spacer'),
        h('button', { type: 'button', 'data-forget': '', title: 'Take them back: the agents\' next requests are asked again', onclick: forgetRemembered }, 'Forget them')),
      h('ul', list.map(r => h('li', h('span.mono', r.agent), ' · ', h('span.mono', r.action), ': ', word(r.kind))))));
  }
  async function forgetRemembered() {
    try {
      const r = await API.forgetRemembered(id);
      const n = (r && r.forgotten) || 0;
      toast(`Forgot ${n} remembered answer${n === 1 ? '' : 's'}: the next requests are asked again`);
    } catch (e) {
      toast(`Forget failed: ${e.message}`, true);
    }
    loadRemembered();
  }

  // The session's event stream: from the start, then live; each
  // reconnection asks for the events after the last one seen (?after=), so
  // nothing is lost or repeated.
  const types = ['session.created', 'session.closed', 'session.moved', 'session.forked', 'agent.starting', 'agent.ready', 'agent.exited', 'agent.evicted', 'agent.context_lost', 'agent.slowed',
    'turn.started', 'turn.ended', 'turn.queued', 'turn.briefing', 'message.chunk', 'tool.call', 'tool.update', 'plan', 'commands', 'mode', 'config', 'session.info',
    'usage', 'permission.requested', 'permission.resolved', 'fs.read', 'fs.write', 'terminal.created', 'terminal.exited', 'pty.output',
    'pty.screen', 'error', 'history', 'worktree.restored', 'sandbox.refused', 'network.refused', 'setup.untrusted', 'setup.copied', 'setup.started',
    'setup.output', 'setup.ended', 'mcp', 'budget.exceeded', 'budget.changed', 'usage.dropped', 'stream.end'];
  function onEvent(type, raw) {
    let ev;
    try { ev = JSON.parse(raw); } catch { return; }
    if (type === 'stream.end') {
      const reason = (ev.data && ev.data.reason) || '';
      if (reason === 'closed') { ended = true; es.close(); refreshSessions().catch(() => {}); }
      return;
    }
    if (ev.seq && ev.seq <= lastSeq) return;
    if (ev.seq) lastSeq = ev.seq;
    stream.push(ev);
    noteAudit(ev);
    if (type === 'session.closed') { closedWith = ev.data || {}; renderHead(); }
    ctl.onEvent(ev);
    usage.onEvent(ev);
    if (type === 'budget.changed') refreshSoon();
    if (type.startsWith('agent.') || type === 'turn.ended' || type === 'session.moved') refreshSoon();
    if (type === 'permission.requested') addPending(permFromEvent(ev));
    if (type === 'permission.resolved') { removePending(id, ev.data.request); closeApproval(ev.data.request); }
  }
  function open() {
    es = openStream(() => `/v1/sessions/${encodeURIComponent(id)}/events?after=${lastSeq}`, {
      onEvent(type, data) { if (types.includes(type)) onEvent(type, data); },
      stop: status => status === 404,
    });
  }
  open();
  stream.onState(renderComposer);

  // The session's agents (warm or cold) and state, read again after the
  // stream says they changed, and every few seconds while visible.
  let refreshTimer = 0;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => API.getSession(id).then(s => { sess = s; renderHead(); }, () => {}), 200);
  }
  const tick = setInterval(() => { if (!document.hidden && !ended) refreshSoon(); }, 5000);
  cleanups.push(() => { clearInterval(tick); clearTimeout(refreshTimer); });

  // Approvals: the oldest pending request of this session opens the
  // dialog, unless the user put it aside.
  function maybeApprove() {
    if (showing()) return;
    const p = pendingOf(id).find(x => !wasDismissed(x.id));
    if (p) openApproval(p);
  }
  document.addEventListener('approval-closed', maybeApprove);
  cleanups.push(() => document.removeEventListener('approval-closed', maybeApprove));

  cleanups.push(on(topic => {
    if (topic === 'sessions' || topic === 'providers' || topic === 'pending') {
      sess = store.sessions.get(id) || sess;
      renderHead();
    }
    if (topic === 'pending') maybeApprove();
  }));
  if (!sess) API.getSession(id).then(s => { sess = s; renderHead(); }).catch(e => {
    put(main, h('div.page', h('h1', 'Session not found'), h('p.muted', e.message), h('a', { href: '#/' }, '← Sessions')));
  });
  store.viewing = id;
  renderHead();
  show('conversation');
  maybeApprove();

  return () => {
    store.viewing = '';
    ended = true;
    if (es) es.close();
    closeApproval();
    for (const c of cleanups) c();
  };
}

/** auditDetail says who or what decided a permission request, for the
 * audit's Detail column: "by you · Allow always", "remembered (Always
 * allow)", "no answer in time", "with the turn". */
function auditDetail(d) {
  const opt = { allow_once: 'Allow once', allow_always: 'Allow always', reject_once: 'Reject once', reject_always: 'Reject always' }[d.option_kind] || d.option_kind || '';
  switch (d.decided_by) {
    case 'user': return `by you${opt ? ' · ' + opt : ''}`;
    // The agent is answered with its allow-once option; what decided is
    // the user's earlier Always allow.
    case 'remembered': return 'remembered (Always allow)';
    case 'policy': return d.cancelled ? decisionText(d) : `the provider's permission policy${opt ? ' · ' + opt : ''}`;
    case 'timeout': return `no answer in time${opt ? ' · ' + opt : ''}`;
    case 'cancel': return decisionText(d).replace(/^cancelled:? ?/, '') || 'cancelled';
    default: return `${d.decided_by || ''}${opt ? ' · ' + opt : ''}`;
  }
}

/** changesPanel is the Changes tab: the turns, and the diff of the one
 * selected, with restore. */
/** mcpView names the session's own MCP servers (with their transport) and
 * the servers each running agent got: names only, never a value (the
 * daemon sends none). */
function mcpView(s) {
  const own = s.mcp_servers || {};
  const names = Object.keys(own).sort();
  const got = (s.agents || []).filter(a => (a.mcp_servers || []).length);
  if (!names.length && !got.length) return null;
  return [h('span.muted', 'MCP servers'),
    names.length ? h('span', { 'data-mcp': '' }, 'session ', h('span.mono', names.map(n => `${n} (${own[n].type || 'stdio'})`).join(', '))) : null,
    got.map(a => h('span', { 'data-mcp': a.agent }, `${a.agent} got `, h('span.mono', a.mcp_servers.join(', '))))];
}

function changesPanel(id, onRestore, opts) {
  const list = h('div.turn-list');
  const view = h('div.grow');
  const el = h('div.tab-body', h('div.changes', h('div', h('h2', 'Turns'), list), view));
  let turns = [];
  let selected = null; // turn id, 0 for the whole session
  let loaded = false;

  async function load(force) {
    if (loaded && !force) return;
    loaded = true;
    try {
      turns = (await API.turns(id)).sort((a, b) => b.id - a.id);
    } catch (e) {
      put(list, h('div.error-text', e.message));
      return;
    }
    renderList();
    if (selected == null) selected = turns.length ? turns[0].id : 0;
    showDiff(selected);
  }

  function renderList() {
    const item = (n, label, sub) => h('button', { type: 'button', class: n === selected ? 'active' : '', 'data-turn': n,
      onclick: () => { selected = n; renderList(); showDiff(n); } }, h('div', label), sub ? h('div.sub', sub) : null);
    put(list, item(0, 'Whole session', 'against the base commit'),
      ...turns.map(t => item(t.id, `#${t.id} ${t.prompt.slice(0, 60)}${t.prompt.length > 60 ? '…' : ''}`,
        `${t.agent} · ${t.stop_reason || (t.ended_at ? 'ended' : 'running')} · ${ago(t.started_at)}`)));
  }

  let shown = 0; // the latest showDiff: an earlier one answered later must not replace it
  async function showDiff(n) {
    const mine = ++shown;
    put(view, h('div.muted', 'Loading…'));
    let d;
    try {
      d = await API.diff(id, n);
    } catch (e) {
      if (mine === shown) put(view, h('div.error-text', e.message));
      return;
    }
    if (mine !== shown) return;
    const st = d.stat || {};
    const actions = n ? h('div.row', h('button', { type: 'button', onclick: () => onRestore(n, false) }, `Restore to before turn ${n}`),
      h('button', { type: 'button', onclick: () => onRestore(n, true) }, `Restore to after turn ${n}`)) : null;
    const files = h('ul.files', (d.files || []).map(f => h('li', h('span.st', (f.status || '?')[0].toUpperCase()),
      h('span.grow', f.old_path ? `${f.old_path} → ${f.path}` : f.path),
      f.binary ? h('span.muted', 'binary') : [h('span.plus', `+${f.additions}`), h('span.minus', `−${f.deletions}`)])));
    put(view, 
      h('div.page-head', h('h2', n ? `Turn ${n}` : 'Whole session'),
        h('span.muted', `${st.files || 0} file${st.files === 1 ? '' : 's'}, +${st.additions || 0} −${st.deletions || 0}`), h('span.spacer'), actions),
      hiddenView(d),
      copiedView(d),
      (d.files || []).length ? files : h('div.empty', 'No changes.'),
      reviewResult(turns.find(t => t.id === n)),
      d.patch ? (n === 0 && opts.open() ? reviewDiff(id, d.patch, opts.onReview) : h('div.diff', patchView(d.patch))) : null,
      d.truncated ? h('div.muted', 'The diff is truncated.') : null);
  }

  return {
    el,
    load: () => load(false),
    reload: () => load(true),
    select(n) { selected = n; loaded = false; load(true); },
    stale() { loaded = false; },
  };
}

/** hiddenView warns of untracked paths that ignore rules the session
 * changed keep out of the diff (an agent's .gitignore of "*"), with the
 * rule that hides each; null when there are none. */
function hiddenView(d) {
  const n = d.hidden_count || 0;
  if (!n) return null;
  const rows = (d.hidden || []).map(x => h('li', h('span.grow.mono', x.path), h('span.muted.mono', x.rule)));
  return h('div.banner.warn.hidden-files', { 'data-hidden': n },
    h('strong', `${n} untracked path${n === 1 ? ' is' : 's are'} hidden from this diff`),
    h('div', 'Ignore rules that this session added or changed keep them out of checkpoints, this diff and the session\'s branch:'),
    h('ul.files', rows),
    n > rows.length ? h('div.muted', `… and ${n - rows.length} more`) : null);
}

/** copiedView names the files the repository's setup copied from the main
 * checkout (.env and the like): never part of the session's work, never
 * committed, and never shown with their content; null when there are none. */
function copiedView(d) {
  const files = d.copied || [];
  if (!files.length) return null;
  return h('div.banner.copied-files', { 'data-copied': files.length },
    h('strong', `${files.length} file${files.length === 1 ? '' : 's'} copied by the setup`),
    h('span', ' from the main checkout: not part of the session\'s work, never committed or merged, and not shown here: '),
    h('span.mono', files.map(f => f.path + (f.present ? '' : ' (gone)')).join('  ')));
}

/** patchView renders a unified diff as text, one line per span. */
export function patchView(patch) {
  const pre = h('pre');
  const lines = patch.split('\n');
  const max = 20000;
  const frag = document.createDocumentFragment();
  for (const l of lines.slice(0, max)) {
    let cls = '';
    if (l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ')) cls = 'f';
    else if (l.startsWith('+')) cls = 'a';
    else if (l.startsWith('-')) cls = 'd';
    else if (l.startsWith('@@')) cls = 'h';
    const s = document.createElement('span');
    if (cls) s.className = cls;
    s.textContent = l || ' ';
    frag.appendChild(s);
  }
  pre.appendChild(frag);
  if (lines.length > max) pre.appendChild(h('span.h', `… ${lines.length - max} more lines`));
  return pre;
}
