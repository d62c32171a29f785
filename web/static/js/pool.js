// The pool: every warm agent with its pid, memory, idle time and how the
// kernel confines it, the pool's counters, and an Evict button per idle
// agent (DELETE /v1/pool/{session}/{agent}, after a confirmation).
import { h, bytes, dur, ago, put, toast, confirmDialog } from './dom.js';
import * as API from './api.js';
import { store, on, refreshPool, pendingOf } from './store.js';

// Why an agent in a state other than idle cannot be evicted.
const NO_EVICT = {
  busy: 'Running a turn: cancel it, or evict the agent once it is idle',
  starting: 'Starting: evict it once it is idle',
  stopping: 'Already stopping',
  crashed: 'Not running: it crashed',
};

/** sessionName is the title of session id when it has one, else its id. */
function sessionName(id) {
  const s = store.sessions.get(id);
  return (s && s.title) || id;
}

/** evictFlow asks to confirm, then evicts agent b (a pool backend). */
async function evictFlow(b) {
  const name = sessionName(b.session);
  const ok = await confirmDialog(`Evict ${b.agent} from session ${name}?`, [
    h('p.flush', `Stops agent ${b.agent}${b.pid ? ` (pid ${b.pid})` : ''} of session ${name} now and frees its memory and its slot in the pool.`),
    h('p.flush.muted', 'The session stays open and keeps its work: the agent starts again, resuming its conversation when it can, on the next prompt to it.'),
  ], [{ label: `Evict ${b.agent}`, class: 'danger solid', value: () => true }]);
  if (!ok) return;
  try {
    await API.evict(b.session, b.agent);
    toast(`${b.agent} of session ${name} evicted.`);
  } catch (e) {
    toast(`Evict failed: ${e.message}`, true);
  }
  await refreshPool().catch(() => {});
}

/** sessionLink links to session id by its title, the id as its tooltip
 * (the id itself, in mono, when the session has no title). */
function sessionLink(id) {
  const s = store.sessions.get(id);
  const href = `#/s/${encodeURIComponent(id)}`;
  if (!s || !s.title) return h('a.mono.truncate', { href, title: id }, id);
  return h('a.truncate', { href, title: `${s.title} (${id})`, 'data-session-title': '' }, s.title);
}

/** confinement is an agent's confinement in a few words: containment,
 * Landlock, "namespaces" when it runs in namespaces of its own (its
 * network through the egress proxy only), its network. */
function confinement(c) {
  if (!c) return h('span.muted', '—');
  const parts = [c.containment || '?'];
  if (c.landlock) parts.push(`landlock v${c.landlock}`);
  if (c.namespaces) parts.push('namespaces');
  if (c.network) parts.push(`net ${c.network}`);
  return h('span', { title: c.cgroup || '' }, h('span.badge', { class: c.warning ? 'warn' : 'ok' }, parts.join(' · ')),
    c.warning ? h('div.muted', c.warning) : null);
}

/** stateBadge is an agent's state in the words of the sessions list: a
 * busy agent is "running" its session's turn, or "waiting for you" when
 * the session has a permission request pending. */
function stateBadge(b) {
  let label = b.state, cls = b.state === 'crashed' ? 'bad' : b.state === 'idle' ? 'ok' : '';
  if (b.state === 'busy') [label, cls] = !b.spare && pendingOf(b.session).length ? ['waiting for you', 'wait'] : ['running', 'info run'];
  return h('span.badge', { class: cls, 'data-state': b.state, title: `agent ${b.state}` }, label);
}

export function poolView(main) {
  const stats = h('div.muted');
  const table = h('div.panel');
  put(main, h('div.page', h('div.page-head', h('h1', 'Pool'), stats), table));

  function render() {
    const p = store.pool;
    if (!p) { put(table, h('div.empty', 'Loading…')); return; }
    const s = p.stats || {};
    stats.textContent = `${s.sessions || 0} sessions · ${s.spawns || 0} spawns · ${s.crashes || 0} crashes · ${s.evictions || 0} evictions · ${s.turns || 0} turns${s.queued ? ` · ${s.queued} queued` : ''}`;
    const list = (p.backends || []).slice().sort((a, b) => (a.session + a.agent).localeCompare(b.session + b.agent));
    if (!list.length) { put(table, h('div.empty', 'No agent is running. A session\'s agent starts when the session is created; an idle agent is stopped after a while and starts again with the next prompt.')); return; }
    put(table, h('table.list.cards',
      h('thead', h('tr', h('th', 'Agent'), h('th', 'Session'), h('th', 'State'), h('th', 'PID'), h('th', 'Memory'), h('th.wide', 'Idle'), h('th.wide', 'Restarts'), h('th', 'Confinement'), h('th', h('span.sr-only', 'Actions')))),
      h('tbody', list.map(b => h('tr', { 'data-agent': b.agent },
        h('td', h('strong', b.agent), h('div.muted', b.kind)),
        h('td', { 'data-label': 'session' }, b.spare
          ? h('span.badge', { title: `spare ${b.session}: the next new session of ${b.agent} on its repository adopts it, agent running` }, 'spare')
          : sessionLink(b.session)),
        h('td', stateBadge(b), b.error ? h('div.muted', b.error) : null),
        h('td.mono', { 'data-label': 'pid' }, b.pid ? String(b.pid) : '—'),
        h('td.mono', { 'data-label': 'memory' }, bytes(b.rss_bytes)),
        h('td.wide', { title: `last active ${ago(b.last_active)}` }, b.state === 'busy' ? '—' : dur(b.idle_for)),
        h('td.wide', String(b.restarts || 0)),
        h('td', confinement(b.confinement)),
        h('td.actions', h('button.small.danger', { type: 'button', 'data-evict': '', disabled: b.state !== 'idle' || b.spare,
          title: NO_EVICT[b.state] || `Stop ${b.agent} now; it starts again on the session's next prompt to it`,
          'aria-label': `Evict ${b.agent} of session ${sessionName(b.session)}`, onclick: () => evictFlow(b) }, 'Evict')))))));
  }
  render();
  refreshPool().catch(() => {});
  const tick = setInterval(() => { if (!document.hidden) refreshPool().catch(() => {}); }, 3000);
  const off = on(topic => { if (topic === 'pool' || topic === 'sessions' || topic === 'pending') render(); });
  return () => { clearInterval(tick); off(); };
}
