// The approval dialog: what the agent wants to do, its kind and risk, the
// raw input and the options it offered. Each button is labelled by the
// daemon from the option's kind (what choosing it does); the agent's own
// name for the option is secondary text, so an agent cannot make "allow
// always" look like "reject". The buttons are in a fixed order (allow once,
// always allow, reject, always reject), focus starts on a reject option,
// and Enter or Space never picks an "always allow" option: that takes a
// click or its digit. Keyboard: the options' digits, Tab between buttons,
// Enter on the focused one, Esc to decide later.
import { h, toast, put, relPath } from './dom.js';
import * as API from './api.js';
import { store, removePending } from './store.js';

const KIND_CLASS = { allow_once: 'primary', allow_always: '', reject_once: 'danger', reject_always: 'danger' };
/** KIND_LABEL says what choosing an option of each kind does. */
export const KIND_LABEL = {
  allow_once: 'Allow once',
  allow_always: 'Always allow in this session',
  reject_once: 'Reject',
  reject_always: 'Always reject',
};
/** KIND_ORDER is the order of the buttons, whatever the agent's order. */
const KIND_ORDER = ['allow_once', 'allow_always', 'reject_once', 'reject_always'];
const RISK_CLASS = { low: 'ok', medium: 'warn', high: 'bad', critical: 'bad' };

let current = null;    // the permission shown
let dismissed = new Set(); // requests the user chose to decide later

/** showing is the id of the request in the dialog, or ''. */
export function showing() { return current ? current.id : ''; }

/** wasDismissed says whether the user put this request aside. */
export function wasDismissed(id) { return dismissed.has(id); }

/** openApproval shows p; it resolves when the dialog closes. */
export function openApproval(p) {
  const dlg = document.getElementById('approval');
  if (current && current.id === p.id && dlg.open) return;
  dismissed.delete(p.id);
  current = p;
  const opts = orderOptions(p.options && p.options.length ? p.options
    : [{ id: 'allow_once', name: 'Allow once', kind: 'allow_once' }, { id: 'reject_once', name: 'Reject', kind: 'reject_once' }]);
  const buttons = opts.map((o, i) => {
    const label = KIND_LABEL[o.kind] || `Unknown choice (${o.kind || 'no kind'})`;
    const said = (o.name || '').trim();
    const b = h('button.opt', {
      type: 'button', class: KIND_CLASS[o.kind] || '', 'data-kind': o.kind || '', 'data-option': o.id,
      title: said ? `The agent calls this option "${said}"` : null,
      onclick: e => {
        // A click that Enter or Space made (detail 0) never grants a
        // standing permission: that takes the mouse or the option's digit.
        if (o.kind === 'allow_always' && e.detail === 0) {
          toast('"Always allow" needs a click or its number key.');
          return;
        }
        choose(p, o);
      },
    }, h('span.opt-row', h('kbd', String(i + 1)), h('span.opt-label', label)),
      said && !sameWords(said, label) ? h('span.opt-said', `the agent calls it “${said}”`) : null);
    return b;
  });
  let raw = '';
  if (p.raw_input != null) {
    try { raw = JSON.stringify(p.raw_input, null, 2); } catch { raw = String(p.raw_input); }
  }
  const rows = [
    ['Agent', p.agent || '—'],
    ['Kind', [p.kind, p.action && p.action !== p.kind ? `(${p.action})` : ''].filter(Boolean).join(' ') || '—'],
    ['Risk', h('span.badge', { class: RISK_CLASS[p.risk] || '' }, p.risk || 'unknown')],
  ];
  const s = store.sessions.get(p.session);
  const root = s && s.worktree ? s.worktree.path : '';
  if (p.locations.length) rows.push(['Where', h('div.mono', p.locations.map(l => h('div', relPath(root, l))))]);
  if (p.turn) rows.push(['Turn', String(p.turn)]);
  if (p.deadline) rows.push(['Answer by', new Date(p.deadline).toLocaleTimeString() + ' (then it is rejected)']);
  put(dlg, 
    h('div.dlg-head', h('h2#approval-title', `${p.agent || 'The agent'} wants to: ${p.title || p.action || p.kind || 'do something'}`),
      h('div.muted', { title: `session ${p.session}`, 'data-approval-session': '' }, `Session ${(s && s.title) || p.session}`)),
    h('div.dlg-body',
      h('dl.kv', rows.map(([k, v]) => [h('dt', k), h('dd', v)])),
      raw ? h('div', h('div.muted', 'Raw input'), h('pre.raw', raw)) : null),
    h('div.dlg-foot', h('button.ghost', { type: 'button', onclick: () => later() }, 'Decide later (Esc)'), h('span.spacer'), buttons),
  );
  dlg.onkeydown = e => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const n = Number(e.key);
    if (n >= 1 && n <= opts.length) { e.preventDefault(); choose(p, opts[n - 1]); }
  };
  dlg.oncancel = e => { e.preventDefault(); later(); };
  if (!dlg.open) dlg.showModal();
  const first = buttons.find(b => b.dataset.kind === 'reject_once') || buttons.find(b => b.dataset.kind === 'reject_always')
    || buttons.find(b => b.dataset.kind !== 'allow_always') || null;
  if (first) first.focus();
  else dlg.querySelector('.dlg-foot button.ghost').focus();
}

/** sameWords says whether the agent's name for an option says nothing the
 * daemon's label does not ("Allow" for "Allow once"): then it is not
 * repeated under the label. Any other name is shown, as the agent's. */
function sameWords(said, label) {
  const words = t => t.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean);
  const have = new Set(words(label));
  return words(said).every(w => have.has(w));
}

/** orderOptions puts the options in the daemon's fixed order by kind;
 * options of unknown kinds come last, in the agent's order. */
export function orderOptions(opts) {
  const rank = o => { const i = KIND_ORDER.indexOf(o.kind); return i < 0 ? KIND_ORDER.length : i; };
  return opts.map((o, i) => ({ o, i })).sort((a, b) => rank(a.o) - rank(b.o) || a.i - b.i).map(x => x.o);
}

function later() {
  if (current) dismissed.add(current.id);
  close();
}

/** closeApproval closes the dialog if it shows request id (answered elsewhere). */
export function closeApproval(id) {
  if (current && (!id || current.id === id)) close();
}

function close() {
  current = null;
  const dlg = document.getElementById('approval');
  if (dlg.open) dlg.close();
  document.dispatchEvent(new CustomEvent('approval-closed'));
}

async function choose(p, o) {
  const dlg = document.getElementById('approval');
  for (const b of dlg.querySelectorAll('button')) b.disabled = true;
  try {
    await API.answer(p.session, p.id, o.kind || o.id);
    removePending(p.session, p.id);
    close();
  } catch (e) {
    if (e.code === 'unknown_request') {
      removePending(p.session, p.id);
      close();
      toast('That request was already answered or has expired.');
      return;
    }
    for (const b of dlg.querySelectorAll('button')) b.disabled = false;
    toast(`Answer failed: ${e.message}`, true);
  }
}
