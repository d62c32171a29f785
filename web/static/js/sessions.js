// The sessions list, the new-session form and the close confirmation.
import { h, ago, toast, confirmDialog, put } from './dom.js';
import * as API from './api.js';
import { store, on, sessionStatus, readyProviders, refreshSessions } from './store.js';

const WARM = new Set(['starting', 'idle', 'busy']);

/** agentChips shows a session's agents and whether each is warm. */
export function agentChips(s) {
  const agents = s.agents || [];
  if (!agents.length) return h('span.chip', h('i'), `${s.active_agent} · cold`);
  return agents.map(a => {
    const warm = WARM.has(a.state);
    const cls = a.state === 'busy' ? 'busy' : a.state === 'crashed' ? 'crashed' : warm ? 'warm' : '';
    return h('span.chip', { class: cls, title: `${a.agent}: ${a.state}${a.pid ? ', pid ' + a.pid : ''}` }, h('i'),
      `${a.agent} · ${warm ? 'warm' : a.state === 'crashed' ? 'crashed' : 'cold'}`);
  });
}

/** lastActivity is the newest of a session's update and its agents' activity. */
export function lastActivity(s) {
  let t = new Date(s.updated_at || s.created_at).getTime();
  for (const a of s.agents || []) {
    const at = new Date(a.last_active).getTime();
    if (at > t) t = at;
  }
  return new Date(t);
}

/** agentPicker is a <select> of the providers a prompt may use. */
export function agentPicker(selected, name = 'agent') {
  const sel = h('select', { name, 'aria-label': 'Agent', onchange: () => { sel.dataset.touched = '1'; } });
  fillPicker(sel, selected);
  return sel;
}

/** fillPicker (re)fills an agent picker, keeping its choice when it can. */
export function fillPicker(sel, selected) {
  // The user's choice stands; until they make one, follow selected.
  const want = (sel.dataset.touched && sel.value) || selected || sel.value;
  const list = readyProviders();
  put(sel, ...list.map(p => h('option', { value: p.id }, `${p.label || p.id}${p.status === 'probing' ? ' (loading)' : ''}`)));
  if (want && !list.some(p => p.id === want)) {
    sel.appendChild(h('option', { value: want, disabled: true }, `${want} (not available)`));
  }
  if (!list.length) sel.appendChild(h('option', { value: '', disabled: true }, 'no provider is enabled and ready'));
  sel.value = list.some(p => p.id === want) ? want : (list[0] ? list[0].id : '');
}

/** sessionsView renders the list into main; it returns its cleanup. */
export function sessionsView(main) {
  let showClosed = false;
  let formOpen = false;
  const table = h('div.panel');
  const form = newSessionForm(() => { formOpen = false; render(); });
  const newBtn = h('button.primary', { type: 'button', onclick: () => { formOpen = !formOpen; render(); if (formOpen) form.querySelector('input').focus(); } }, 'New session');
  const closedToggle = h('label.row.muted', h('input', { type: 'checkbox', onchange: e => { showClosed = e.target.checked; render(); } }), 'Show closed');
  const count = h('span.muted');
  put(main, h('div.page', h('div.page-head', h('h1', 'Sessions'), count, h('span.spacer'), closedToggle, newBtn), form, table));

  function render() {
    const all = [...store.sessions.values()];
    const open = all.filter(s => s.status !== 'closed');
    const list = (showClosed ? all : open).sort((a, b) => lastActivity(b) - lastActivity(a));
    count.textContent = `${open.length} open${all.length > open.length ? `, ${all.length - open.length} closed` : ''}`;
    form.hidden = !(formOpen || (store.sessions.size === 0 && store.providers));
    newBtn.textContent = formOpen ? 'Hide form' : 'New session';
    for (const sel of form.querySelectorAll('select[name=agent]')) fillPicker(sel);
    if (!list.length) {
      put(table, h('div.empty', store.sessions.size ? 'No open sessions.' : 'No sessions yet: create one above.'));
      return;
    }
    const rows = list.map(s => {
      const st = sessionStatus(s);
      const go = () => { location.hash = `#/s/${encodeURIComponent(s.id)}`; };
      return h('tr.click', { 'data-session': s.id, onclick: go, tabindex: 0, onkeydown: e => { if (e.key === 'Enter') go(); } },
        h('td', h('span.badge', { class: st.cls, 'data-status': st.key }, st.label)),
        h('td.name', h('a', { href: `#/s/${encodeURIComponent(s.id)}`, title: s.title ? `${s.title} (${s.id})` : s.id, class: s.title ? '' : 'mono sid' }, s.title || s.id),
          s.title ? h('div.muted.mono.sid', { title: s.id }, s.id) : null),
        h('td.wide', h('span.truncate.mono', { title: s.repo }, s.repo)),
        h('td.wide', h('span.truncate.mono', { title: s.worktree && s.worktree.branch }, (s.worktree && s.worktree.branch) || '—')),
        h('td', agentChips(s)),
        h('td.wide.muted', { title: lastActivity(s).toLocaleString() }, ago(lastActivity(s))));
    });
    put(table, h('table.list.cards', h('thead', h('tr', h('th', 'Status'), h('th', 'Session'), h('th.wide', 'Repository'),
      h('th.wide', 'Branch'), h('th', 'Agents'), h('th.wide', 'Last activity'))), h('tbody', rows)));
  }
  render();
  const off = on(topic => { if (topic === 'sessions' || topic === 'pending' || topic === 'providers') render(); });
  const tick = setInterval(render, 30000);
  return () => { off(); clearInterval(tick); };
}

/** newSessionForm is the form that creates a session; done() hides it. */
function newSessionForm(done) {
  const repo = h('input', { type: 'text', name: 'repo', required: true, placeholder: '/path/to/your/repository', autocomplete: 'off',
    value: localStorage.getItem('agentpool.repo') || '' });
  const base = h('input', { type: 'text', name: 'base_ref', placeholder: 'HEAD', autocomplete: 'off' });
  const title = h('input', { type: 'text', name: 'title', placeholder: 'optional', autocomplete: 'off' });
  const agent = agentPicker(localStorage.getItem('agentpool.agent') || 'demo');
  const err = h('div.error-text', { role: 'alert' });
  const submit = h('button.primary', { type: 'submit' }, 'Create session');
  const form = h('form.panel.padded.mb', { onsubmit: async e => {
    e.preventDefault();
    err.textContent = '';
    submit.disabled = true;
    try {
      const s = await API.createSession({ repo: repo.value.trim(), base_ref: base.value.trim() || undefined, agent: agent.value, title: title.value.trim() || undefined });
      localStorage.setItem('agentpool.repo', repo.value.trim());
      localStorage.setItem('agentpool.agent', agent.value);
      await refreshSessions().catch(() => {});
      done();
      location.hash = `#/s/${encodeURIComponent(s.id)}`;
    } catch (e2) {
      err.textContent = e2.message;
      (e2.field === 'base_ref' ? base : e2.field === 'agent' ? agent : repo).focus();
    } finally {
      submit.disabled = false;
    }
  } },
  h('h2', 'New session'),
  h('div.form-grid',
    h('label.field', 'Repository', h('span.hint', 'path of a git repository on this machine'), repo),
    h('label.field', 'Base ref', h('span.hint', 'branch, tag or commit'), base),
    h('label.field', 'Agent', h('span.hint', 'enabled and ready providers'), agent),
    h('label.field', 'Title', h('span.hint', 'free text'), title)),
  err,
  h('div.form-actions', h('button', { type: 'button', onclick: done }, 'Cancel'), submit));
  return form;
}

/** closeSessionFlow asks keep-or-discard and closes session s. */
export async function closeSessionFlow(s) {
  const branch = (s.worktree && s.worktree.branch) || 'its branch';
  const path = (s.worktree && s.worktree.path) || 'its worktree';
  const keep = h('input', { type: 'radio', name: 'close-mode', value: 'keep', checked: true });
  const discard = h('input', { type: 'radio', name: 'close-mode', value: 'discard' });
  const body = [
    h('p.flush', 'The session\'s agents are stopped and its worktree is removed.'),
    h('label.choice', keep, h('span', h('strong', 'Keep the work'),
      h('small', `Uncommitted changes are committed to branch ${branch}, which stays in the repository.`))),
    h('label.choice', discard, h('span', h('strong', 'Discard the work'),
      h('small', `Deletes the worktree ${path} with its uncommitted changes, the branch ${branch} with its commits, and the turn checkpoints. This cannot be undone.`))),
  ];
  const choice = await confirmDialog(`Close session ${s.title || s.id}?`, body,
    [{ label: 'Close session', class: 'danger solid', value: () => (discard.checked ? 'discard' : 'keep') }]);
  if (!choice) return false;
  try {
    const res = await API.closeSession(s.id, choice === 'discard');
    const wt = res.worktree || {};
    toast(wt.discarded ? 'Session closed; its work was discarded.'
      : `Session closed; work kept on branch ${wt.branch || branch}${wt.commit ? ' at ' + wt.commit.slice(0, 10) : ''}.`);
    await refreshSessions().catch(() => {});
    return true;
  } catch (e) {
    toast(`Close failed: ${e.message}`, true);
    return false;
  }
}
