// Attempts: one prompt run as several sessions side by side (#/attempts:
// start one, the list; #/a/ID: the attempts in columns, each with its
// stats, its check's result and its diff, and a Pick button).
import { h, put, toast, confirmDialog, ago } from './dom.js';
import { api, ApiError } from './api.js';
import { readyProviders, permFromPending } from './store.js';
import { patchView } from './session.js';
import { openApproval } from './approval.js';

const enc = encodeURIComponent;

/** attemptsView renders the list and the start form; it returns its cleanup. */
export function attemptsView(main) {
  const list = h('div.panel');
  const prompt = h('textarea', { name: 'prompt', rows: 3, required: true, placeholder: 'what every attempt should do' });
  const repo = h('input', { type: 'text', name: 'repo', required: true, placeholder: '/path/to/your/repository', autocomplete: 'off',
    value: localStorage.getItem('agentpool.repo') || '' });
  const base = h('input', { type: 'text', name: 'base', placeholder: 'HEAD', autocomplete: 'off' });
  const check = h('input', { type: 'text', name: 'check', placeholder: 'optional, e.g. go test ./...', autocomplete: 'off' });
  const agents = h('div.row.attempt-agents');
  // One attempt of the agent last used (else the first ready one) to
  // start with; the others at 0.
  const ready = readyProviders();
  const last = localStorage.getItem('agentpool.agent');
  const first = ready.some(p => p.id === last) ? last : (ready[0] || {}).id;
  for (const p of ready) {
    agents.appendChild(h('label.row', h('input', { type: 'number', min: 0, max: 10, value: p.id === first ? 1 : 0, 'data-agent': p.id, 'aria-label': `attempts of ${p.id}`, class: 'attempt-n' }), p.label || p.id));
  }
  if (!agents.children.length) agents.appendChild(h('span.muted', 'no provider is enabled and ready'));
  const err = h('div.error-text', { role: 'alert' });
  const submit = h('button.primary', { type: 'submit' }, 'Start attempts');
  const form = h('form.panel.padded.mb', { onsubmit: async e => {
    e.preventDefault();
    err.textContent = '';
    const chosen = [];
    for (const n of agents.querySelectorAll('input[data-agent]')) for (let i = 0; i < Number(n.value); i++) chosen.push(n.dataset.agent);
    submit.disabled = true;
    try {
      const set = await api('POST', '/v1/attempts', { prompt: prompt.value, repo: repo.value.trim(), base: base.value.trim() || undefined,
        agents: chosen, check: check.value.trim() || undefined });
      localStorage.setItem('agentpool.repo', repo.value.trim());
      location.hash = `#/a/${enc(set.id)}`;
    } catch (e2) {
      err.textContent = e2.message;
    } finally {
      submit.disabled = false;
    }
  } },
  h('h2', 'New attempts'),
  h('label.field', 'Prompt', prompt),
  h('div.form-grid',
    h('label.field', 'Repository', h('span.hint', 'path of a git repository on this machine'), repo),
    h('label.field', 'Base', h('span.hint', 'branch or commit; every attempt starts on the same commit'), base),
    h('label.field', 'Check', h('span.hint', 'a shell command run, confined, in each worktree after its turn'), check)),
  h('div.field.attempt-field', h('span', 'Attempts per agent'), agents),
  err,
  h('div.form-actions', submit));

  async function load() {
    let body;
    try { body = await api('GET', '/v1/attempts'); } catch (e) { put(list, h('div.pad.error-text', e.message)); return; }
    const sets = body.attempts || [];
    if (!sets.length) { put(list, h('div.empty', 'No attempts yet: start some above.')); return; }
    put(list, h('table.list', h('thead', h('tr', h('th', 'State'), h('th', 'Prompt'), h('th', 'Attempts'), h('th.wide', 'Started'))),
      h('tbody', sets.map(s => {
        const go = () => { location.hash = `#/a/${enc(s.id)}`; };
        return h('tr.click', { 'data-set': s.id, onclick: go },
          h('td', setBadge(s), asking(s) ? h('span.badge.warn', { 'data-asks': '' }, 'waiting for you') : null),
          h('td.name', h('a', { href: `#/a/${enc(s.id)}` }, s.title || firstLine(s.prompt)), h('div.muted.mono', s.id)),
          h('td', s.attempts.map(a => a.agent).join(', ')),
          h('td.wide.muted', ago(new Date(s.created_at))));
      }))));
  }
  put(main, h('div.page', h('div.page-head', h('h1', 'Attempts')), form, list));
  load();
  const t = setInterval(load, 5000);
  return () => clearInterval(t);
}

/** attemptSetView renders set id's attempts side by side; it returns its
 * cleanup. */
export function attemptSetView(main, id) {
  let stopped = false;
  const diffs = new Map(); // session → diff element, loaded once the attempt ended
  const page = h('div.page');
  put(main, page);

  async function load() {
    let s;
    try { s = await api('GET', `/v1/attempts/${enc(id)}`); } catch (e) { put(page, h('div.pad.error-text', e.message)); return; }
    render(s);
    if (s.state === 'running' && !stopped) setTimeout(load, 1500);
  }

  function render(s) {
    const cols = s.attempts.map(a => column(s, a));
    put(page,
      h('div.page-head', h('h1', s.title || 'Attempts'), setBadge(s), h('span.muted.mono', s.id)),
      h('div.panel.padded.mb',
        h('div', h('strong', 'Prompt: '), h('span.prewrap', s.prompt)),
        h('div.muted', 'Base ', h('span.mono', (s.base_commit || '').slice(0, 12)), s.base ? ` (${s.base})` : '', ' of ', h('span.mono', s.repo)),
        s.check ? h('div.muted', 'Check: ', h('code', s.check)) : null),
      h('div.attempt-cols', cols));
  }

  function column(s, a) {
    const ended = a.state === 'done' || a.state === 'failed';
    const picked = s.picked === a.session;
    const stats = h('dl.attempt-stats',
      h('dt', 'State'), h('dd', h('span.badge', { class: stateCls(a.state) }, a.state)),
      h('dt', 'Stop'), h('dd', a.stop_reason || '—'),
      h('dt', 'Time'), h('dd', a.duration_ms ? `${(a.duration_ms / 1000).toFixed(1)} s` : '—'),
      h('dt', 'Changes'), h('dd', `${a.files_changed} file${a.files_changed === 1 ? '' : 's'} `, h('span.add', `+${a.lines_added}`), ' ', h('span.del', `−${a.lines_removed}`)),
      h('dt', 'Tokens'), h('dd', tokensText(a.usage)),
      h('dt', 'Check'), h('dd', checkView(a.check)));
    let diff = diffs.get(a.session);
    if (!diff && ended) {
      diff = h('div.attempt-diff', h('span.muted', 'Loading the diff…'));
      diffs.set(a.session, diff);
      api('GET', `/v1/sessions/${enc(a.session)}/diff?turn=0`).then(d => {
        put(diff, d.patch ? h('div.diff', patchView(d.patch)) : h('span.muted', 'No changes.'),
          d.truncated ? h('div.muted', 'The diff is truncated.') : null);
      }).catch(e => put(diff, h('span.error-text', e.message)));
    }
    const pick = s.state === 'done' && ended
      ? h('button.primary', { type: 'button', 'data-pick': a.session, onclick: () => pickFlow(s, a) }, 'Pick this one')
      : null;
    return h('section.panel.padded.attempt-col', { class: picked ? 'picked' : '', 'data-session': a.session },
      h('div.row', h('strong', a.agent), h('a.mono.muted.sid', { href: `#/s/${enc(a.session)}` }, a.session), picked ? h('span.badge.ok', 'picked') : null,
        a.closed ? h('span.badge.plain', 'closed') : null),
      stats,
      pendingView(a),
      a.error ? h('div.error-text', a.error) : null,
      a.check && a.check.output ? h('details', h('summary', 'Check output'), h('pre.attempt-out', a.check.output)) : null,
      pick ? h('div.form-actions', pick) : null,
      diff || null);
  }

  async function pickFlow(s, a) {
    const discard = h('input', { type: 'checkbox', name: 'discard' });
    const squash = h('input', { type: 'checkbox', name: 'squash' });
    const others = s.attempts.filter(o => o.session !== a.session).length;
    const ok = await confirmDialog(`Pick ${a.agent}'s attempt?`, [
      h('p', `Its branch is merged into ${s.into || 'the base branch'}, and the ${others} other attempt${others === 1 ? ' is' : 's are'} closed.`),
      h('label.row', discard, 'Delete the other attempts\' branches (their work is lost)'),
      h('label.row', squash, 'Squash into one commit')],
    [{ label: 'Pick and merge', class: 'primary', value: () => true }]);
    if (!ok) return;
    try {
      const res = await api('POST', `/v1/attempts/${enc(id)}/pick`, { session: a.session, discard: discard.checked, squash: squash.checked });
      toast(`Merged ${res.merge.branch} into ${res.merge.into} (${res.merge.method}).`);
      render(res);
    } catch (e) {
      toast(e instanceof ApiError && e.status === 409 ? `Not merged: ${e.message}` : `Pick failed: ${e.message}`, true);
    }
  }

  load();
  return () => { stopped = true; };
}

/** asking says whether an attempt of set s waits for a permission answer. */
function asking(s) {
  return s.attempts.some(a => (a.pending_permissions || []).length > 0);
}

/** pendingView lists the permission requests attempt a waits for, each
 * with what it asks, its deadline and a button that opens the approval
 * dialog; null when none waits. */
function pendingView(a) {
  const list = a.pending_permissions || [];
  if (!list.length) return null;
  return h('div.attempt-asks', { role: 'alert' },
    h('strong', `Waits for your answer (${list.length} permission request${list.length === 1 ? '' : 's'})`),
    list.map(p => {
      const perm = permFromPending(a.session, p);
      const left = p.deadline ? Math.max(0, Math.round((new Date(p.deadline) - Date.now()) / 1000)) : 0;
      return h('div.row', { 'data-request': p.id },
        h('span', perm.title || perm.action || perm.kind || 'an action', perm.risk ? h('span.muted', ` · risk ${perm.risk}`) : null,
          left ? h('span.muted', ` · rejected in ${left >= 60 ? `${Math.floor(left / 60)} min ${left % 60} s` : `${left} s`}`) : null),
        h('button.primary', { type: 'button', 'data-answer': p.id, onclick: () => openApproval(perm) }, 'Answer…'));
    }));
}

function checkView(c) {
  if (!c) return h('span.muted', 'none');
  const cls = { passed: 'ok', failed: 'bad', running: 'run info', pending: 'wait', none: 'plain' }[c.state] || '';
  return h('span', h('span.badge', { class: cls, 'data-check': c.state }, c.state), c.state === 'failed' ? h('span.muted', ` exit ${c.exit_code}`) : null);
}

function stateCls(st) {
  return { done: 'ok', failed: 'bad', running: 'run info', checking: 'run info', starting: 'wait' }[st] || '';
}

function setBadge(s) {
  return h('span.badge', { class: { running: 'run info', done: 'ok', picked: 'ok' }[s.state] || '', 'data-state': s.state }, s.state);
}

function firstLine(s) {
  const l = (s || '').trim().split('\n')[0];
  return l.length > 80 ? l.slice(0, 80) + '…' : l;
}

/** tokensText says an attempt's tokens in words: total, and in/out. */
function tokensText(u) {
  if (!u || !u.total) return 'not reported';
  const k = (n) => (n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n));
  return `${k(u.total)} (in ${k(u.input || 0)}, out ${k(u.output || 0)})`;
}
