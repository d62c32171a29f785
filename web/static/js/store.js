// The page's shared state, kept current by the daemon-wide event stream
// (GET /v1/events): sessions, providers, the pool, pending permission
// requests, and the "needs you" count shown in the tab title.
import * as API from './api.js';
import { openStream } from './sse.js';

export const store = {
  sessions: new Map(),   // id → session (GET /v1/sessions)
  providers: null,       // registry snapshot (GET /v1/providers)
  pool: null,            // GET /v1/pool
  pending: new Map(),    // session id → Map(request id → permission)
  lastStop: new Map(),   // session id → stop_reason of its last ended turn
  unseenTurns: 0,        // turns that ended while the tab was hidden
  live: false,           // the daemon-wide stream is open
  viewing: '',           // the session shown, if one
};

const listeners = new Set();

/** on calls fn(topic) after each change: sessions, providers, pool,
 * pending, needs, live. It returns the function that unsubscribes. */
export function on(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function emit(topic) {
  for (const fn of [...listeners]) {
    try { fn(topic); } catch (e) { console.error(e); }
  }
}

/** permFromEvent is a permission.requested event as a permission. */
export function permFromEvent(ev) {
  const d = ev.data || {};
  return { id: d.request, session: ev.session, agent: ev.agent, turn: ev.turn, title: d.title || '', kind: d.kind || '',
    action: d.action || '', locations: d.locations || [], raw_input: d.raw_input, options: d.options || [],
    risk: d.risk || '', deadline: d.deadline, tool_call_id: d.tool_call_id || '' };
}

/** permFromPending is an entry of GET .../permissions as a permission. */
export function permFromPending(session, p) {
  const r = p.request || {};
  return { id: p.id, session, agent: r.agent, turn: r.turn, title: r.title || '', kind: r.tool_kind || '',
    action: r.action || '', locations: r.locations || [], raw_input: r.raw_input, options: r.options || [],
    risk: p.risk || '', deadline: p.deadline, tool_call_id: r.tool_call_id || '' };
}

// changes counts the events that added or removed a pending request, and
// changed says, per request id, at which count it last changed: a refresh
// whose answer was read before an event must not undo that event.
let changes = 0;
const changed = new Map();

/** addPending records a pending request (idempotent). */
export function addPending(p) {
  if (!p.id || !p.session) return;
  changed.set(p.id, { at: ++changes, pending: p });
  let m = store.pending.get(p.session);
  if (!m) store.pending.set(p.session, m = new Map());
  if (m.has(p.id)) return;
  m.set(p.id, p);
  emit('pending');
  updateNeeds();
}

/** removePending forgets an answered request. */
export function removePending(session, id) {
  changed.set(id, { at: ++changes, pending: null });
  const m = store.pending.get(session);
  if (m && m.delete(id)) {
    if (!m.size) store.pending.delete(session);
    emit('pending');
    updateNeeds();
  }
}

/** pendingOf lists a session's pending requests, oldest first. */
export function pendingOf(session) {
  return [...(store.pending.get(session) || new Map()).values()];
}

/** pendingCount is the number of requests waiting for an answer. */
export function pendingCount() {
  let n = 0;
  for (const m of store.pending.values()) n += m.size;
  return n;
}

/** needsCount is what the tab title counts. */
export function needsCount() {
  return pendingCount() + store.unseenTurns;
}

function updateNeeds() {
  const n = needsCount();
  const base = 'agentpool';
  document.title = n > 0 ? `(${n}) ${base}` : base;
  const badge = document.getElementById('needs');
  if (badge) {
    badge.hidden = n === 0;
    document.getElementById('needs-count').textContent = String(n);
    const first = [...store.pending.keys()][0];
    badge.href = first ? `#/s/${encodeURIComponent(first)}` : '#/';
  }
  emit('needs');
}

/** notify raises a browser notification when allowed and useful. */
function notify(title, body, session) {
  if (!('Notification' in window) || Notification.permission !== 'granted') return;
  if (!document.hidden && store.viewing === session) return;
  try {
    const n = new Notification(title, { body, tag: session ? `agentpool-${session}` : undefined });
    n.onclick = () => { window.focus(); if (session) location.hash = `#/s/${encodeURIComponent(session)}`; n.close(); };
  } catch { /* some platforms allow notifications from service workers only */ }
}

/** sessionStatus is a session's state for people: idle, running, waiting
 * for you, failing or closed, with the badge class. */
export function sessionStatus(s) {
  if (s.status === 'closed') return { key: 'closed', label: 'closed', cls: '' };
  if (pendingOf(s.id).length) return { key: 'waiting', label: 'waiting for you', cls: 'wait' };
  const crashed = (s.agents || []).some(a => a.state === 'crashed');
  const stop = store.lastStop.get(s.id);
  if (crashed || stop === 'error' || stop === 'timeout') return { key: 'failing', label: 'failing', cls: 'bad' };
  if (s.busy) return { key: 'running', label: 'running', cls: 'info run' };
  return { key: 'idle', label: 'idle', cls: 'ok' };
}

/** readyProviders are the providers a prompt may use: enabled and ready
 * (or being probed, which does not stop a launch). */
export function readyProviders() {
  const list = (store.providers && store.providers.providers) || [];
  return list.filter(p => p.enabled && (p.status === 'ready' || p.status === 'probing'));
}

let timers = {};
/** debounce runs fn once, ms after the last call for key. */
export function debounce(key, ms, fn) {
  clearTimeout(timers[key]);
  timers[key] = setTimeout(fn, ms);
}

export async function refreshSessions() {
  const list = await API.listSessions();
  store.sessions = new Map(list.map(s => [s.id, s]));
  emit('sessions');
}

export async function refreshProviders() {
  store.providers = await API.providers();
  emit('providers');
}

export async function refreshPool() {
  store.pool = await API.poolStatus();
  emit('pool');
}

/** refreshPending reads every open session's pending requests. */
export async function refreshPending() {
  const from = changes;
  const open = [...store.sessions.values()].filter(s => s.status !== 'closed');
  const all = await Promise.all(open.map(s => API.permissions(s.id).then(l => [s.id, l], () => [s.id, []])));
  const next = new Map();
  const put = p => {
    let m = next.get(p.session);
    if (!m) next.set(p.session, m = new Map());
    m.set(p.id, p);
  };
  for (const [id, list] of all) {
    for (const raw of list) {
      const c = changed.get(raw.id);
      if (!c || c.at <= from || c.pending) put(permFromPending(id, raw)); // not answered since the read began
    }
  }
  // Requests that arrived, by event, while the lists were read.
  for (const [id, c] of changed) {
    if (c.at > from && c.pending && !(next.get(c.pending.session) || new Map()).has(id)) put(c.pending);
  }
  store.pending = next;
  if (changed.size > 1000) changed.clear();
  emit('pending');
  updateNeeds();
}

export async function refreshAll() {
  await Promise.all([refreshSessions(), refreshProviders(), refreshPool()]);
  await refreshPending();
}

const daemonTypes = ['pool.status', 'provider.changed', 'session.created', 'session.closed', 'agent.starting', 'agent.ready',
  'agent.exited', 'agent.evicted', 'agent.context_lost', 'turn.started', 'turn.ended', 'permission.requested',
  'permission.resolved', 'stream.end'];

let stream = null;

/** connect opens the daemon-wide stream; it reconnects by itself, and
 * reads everything again on each (re)connection, as the stream has no
 * replay. */
export function connect() {
  if (stream) stream.close();
  const live = v => { store.live = v; emit('live'); };
  stream = openStream(() => '/v1/events', {
    onOpen() {
      live(true);
      refreshAll().catch(() => {});
    },
    onDown() { live(false); },
    onEvent(type, data) {
      if (type === 'stream.end') live(false);
      if (daemonTypes.includes(type)) onDaemonEvent(type, data);
    },
  });
}

/** disconnect closes the daemon-wide stream (at logout). */
export function disconnect() {
  if (stream) stream.close();
  stream = null;
}

function onDaemonEvent(type, raw) {
  let ev;
  try { ev = JSON.parse(raw); } catch { return; }
  ev.data = ev.data || {};
  switch (type) {
    case 'pool.status':
      store.pool = ev.data;
      emit('pool');
      return;
    case 'provider.changed':
      debounce('providers', 50, () => refreshProviders().catch(() => {}));
      return;
    case 'permission.requested': {
      const p = permFromEvent(ev);
      addPending(p);
      notify(`${ev.agent || 'An agent'} asks for permission`, p.title || p.action || p.kind, ev.session);
      break;
    }
    case 'permission.resolved':
      removePending(ev.session, ev.data.request);
      break;
    case 'turn.ended':
      store.lastStop.set(ev.session, ev.data.stop_reason || '');
      if (document.hidden) {
        store.unseenTurns++;
        updateNeeds();
        notify(`Turn ended: ${ev.data.stop_reason || 'done'}`, `${ev.agent || ''} in session ${ev.session}`, ev.session);
      }
      break;
    case 'turn.started':
      store.lastStop.delete(ev.session);
      break;
    case 'stream.end':
      return;
  }
  debounce('sessions', 150, () => refreshSessions().catch(() => {}));
  if (type.startsWith('agent.')) debounce('pool', 300, () => refreshPool().catch(() => {}));
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && store.unseenTurns) {
    store.unseenTurns = 0;
    updateNeeds();
  }
});

export { updateNeeds };
