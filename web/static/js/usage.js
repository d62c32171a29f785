// What a session used, in its head: tokens (from each turn's answer), the
// context window of its agents (used of size, as they last reported it),
// the cost (the latest cumulative cost of each agent session, summed; one
// amount per currency, never added across), and its budget, with a
// dialog to set, raise or remove it (PUT /v1/sessions/{id}/budget). A
// budget in one currency does not count cost reported in another: the
// box says so. Live usage events update the context bar between reads.
import { h, put, confirmDialog, toast } from './dom.js';
import * as API from './api.js';

const fmt = n => n >= 1e6 ? (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + 'M' : n >= 1e4 ? Math.round(n / 1e3) + 'k' : n >= 1e3 ? (n / 1e3).toFixed(1) + 'k' : String(n);
const money = m => `${+m.amount.toFixed(6)} ${m.currency}`;

/** usageBox returns the usage box of session id: el, render(sess) with
 * the session as GET /v1/sessions/{id} answers it, and onEvent(ev). */
export function usageBox(id) {
  const el = h('div.usage-box', { 'data-usage': '' });
  let usage = null;
  let live = {}; // agent → {used, size, cost} from usage events since the last read
  let exceeded = null; // the last budget.exceeded of this view

  function render(sess) {
    if (sess && sess.usage) { usage = sess.usage; live = {}; }
    draw(sess);
  }

  function onEvent(ev) {
    const d = ev.data || {};
    if (ev.type === 'usage') {
      live[ev.agent] = { used: d.used, size: d.size, cost: d.cost };
      draw();
    } else if (ev.type === 'budget.exceeded') {
      exceeded = d;
      draw();
    } else if (ev.type === 'budget.changed') {
      exceeded = null;
    }
  }

  let lastSess = null;
  function draw(sess) {
    if (sess) lastSess = sess;
    const closed = lastSess && lastSess.status === 'closed';
    const u = usage || { tokens: { total: 0, input: 0, output: 0 }, cost: [], agents: [], turns: 0 };
    const b = u.budget || null;
    const t = u.tokens || {};
    const parts = [];
    parts.push(h('span.usage-item', { 'data-usage-tokens': String(t.total || 0), title: tokenTitle(u) },
      h('strong', fmt(t.total || 0)), ' tokens', b && b.tokens ? h('span.muted', ` of ${fmt(b.tokens)}`) : null));
    const ctx = contextOf(u);
    if (ctx) {
      const pct = Math.min(100, Math.round(100 * ctx.used / ctx.size));
      parts.push(h('span.usage-item.ctx', { title: `${ctx.agent}'s context window: ${ctx.used} of ${ctx.size} tokens (as the agent last reported it)` },
        ctx.several ? `${ctx.agent} context ` : 'context ', h('span.bar', { role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': String(ctx.size), 'aria-valuenow': String(ctx.used), 'aria-label': 'context window used', 'data-context': `${ctx.used}/${ctx.size}` },
          h('span.fill', { class: pct >= 90 ? 'bad' : pct >= 70 ? 'warn' : '', style: `width:${pct}%` })), ` ${pct}%`));
    }
    const cost = costOf(u);
    parts.push(h('span.usage-item', { 'data-usage-cost': cost.map(money).join(' + ') || 'none' },
      'cost ', cost.length ? h('strong', cost.map(money).join(' + ')) : h('span.muted', 'not reported'),
      b && b.cost ? h('span.muted', ` of ${b.cost} ${b.currency}`) : null));
    parts.push(h('span.usage-item', { 'data-budget': b ? budgetText(b) : 'none' }, 'budget ', b ? h('strong', budgetText(b)) : h('span.muted', 'none')));
    if (!closed) parts.push(h('button.small', { type: 'button', 'data-budget-edit': '', onclick: () => editBudget(b) }, b ? 'Edit budget' : 'Set budget'));
    const notes = [];
    const other = b && b.cost ? cost.filter(m => m.currency !== b.currency) : [];
    if (other.length) {
      notes.push(h('div.usage-note', { 'data-usage-note': 'currency' },
        `Cost in ${other.map(m => m.currency).join(', ')} (${other.map(money).join(' + ')}) is not counted against the budget in ${b.currency}.`));
    }
    const over = exceeded || overOf(u, b);
    if (over && !closed) {
      notes.push(h('div.banner.bad.usage-over', { role: 'alert', 'data-budget-exceeded': over.kind || '' },
        h('strong', over.cancelled ? 'Turn cancelled: budget used up. ' : 'Budget used up. '),
        h('span', over.message || 'Prompts are refused until the budget is raised.'), ' ',
        over.scope === 'provider' ? null : h('button.small', { type: 'button', onclick: () => editBudget(b) }, 'Raise budget')));
    }
    put(el, h('div.usage-line', parts), notes);
  }

  async function editBudget(b) {
    b = b || {};
    const tokens = h('input', { type: 'number', name: 'budget-tokens', min: '0', step: '1', value: b.tokens || '', placeholder: 'no limit', inputmode: 'numeric' });
    const cost = h('input', { type: 'number', name: 'budget-cost', min: '0', step: 'any', value: b.cost || '', placeholder: 'no limit', inputmode: 'decimal' });
    const currency = h('input', { type: 'text', name: 'budget-currency', value: b.currency || 'USD', maxlength: '3', autocomplete: 'off', style: 'text-transform:uppercase' });
    const body = [
      h('p.flush', 'A prompt that would start past the budget is refused; a turn that crosses it is cancelled and says why. Tokens count the turns\' tokens as the agents report them; cost counts only what they report in the budget\'s currency.'),
      h('label.field', 'Tokens', h('span.hint', 'the most tokens the session\'s turns may use; empty for no limit'), tokens),
      h('label.field', 'Cost', h('span.hint', 'the most the session\'s agents may cost; empty for no limit'), cost),
      h('label.field', 'Currency', h('span.hint', 'ISO 4217 code, e.g. USD'), currency),
    ];
    const buttons = [{ label: 'Save budget', class: 'primary', value: () => 'save' }];
    if (b.tokens || b.cost) buttons.unshift({ label: 'Remove budget', class: 'danger', value: () => 'clear' });
    const choice = await confirmDialog('Session budget', body, buttons);
    if (!choice) return;
    const req = {};
    if (choice === 'save') {
      const n = Number(tokens.value), c = Number(cost.value);
      if (tokens.value && n > 0) req.tokens = Math.floor(n);
      if (cost.value && c > 0) { req.cost = c; req.currency = currency.value.trim().toUpperCase(); }
    }
    try {
      usage = await API.setBudget(id, req);
      live = {};
      exceeded = null;
      draw();
      toast(req.tokens || req.cost ? `Budget set: ${budgetText(req)}.` : 'Budget removed.');
    } catch (e) {
      toast(`Budget not set: ${e.message}`, true);
    }
  }

  /** contextOf is the fullest context window among the session's agents,
   * live usage events overriding the last read. */
  function contextOf(u) {
    const byAgent = {};
    for (const a of u.agents || []) if (a.context && a.context.size) byAgent[a.agent] = { agent: a.agent, ...a.context };
    for (const [agent, l] of Object.entries(live)) if (l.size) byAgent[agent] = { agent, used: l.used || 0, size: l.size };
    const several = Object.keys(byAgent).length > 1;
    const active = lastSess && byAgent[lastSess.active_agent];
    const pick = active || Object.values(byAgent).sort((x, y) => y.used / y.size - x.used / x.size)[0];
    return pick ? { ...pick, several } : null;
  }

  /** costOf is the session's cost, a live event's cumulative cost
   * replacing its agent's part once it is higher. */
  function costOf(u) {
    const out = (u.cost || []).map(m => ({ ...m }));
    for (const [agent, l] of Object.entries(live)) {
      if (!l.cost) continue;
      const a = (u.agents || []).find(x => x.agent === agent);
      const known = ((a && a.cost) || []).find(m => m.currency === l.cost.currency);
      const delta = l.cost.amount - (known ? known.amount : 0);
      if (delta <= 0 || (a && a.agent_sessions > 1)) continue;
      const m = out.find(x => x.currency === l.cost.currency);
      if (m) m.amount += delta; else out.push({ amount: delta, currency: l.cost.currency });
    }
    return out;
  }

  return { el, render, onEvent };
}

/** overOf says whether usage u is past budget b, as the daemon would. */
function overOf(u, b) {
  if (!b) return null;
  const t = (u.tokens || {}).total || 0;
  if (b.tokens && t >= b.tokens) return { kind: 'tokens', message: `${t} of ${b.tokens} tokens used: prompts are refused until the budget is raised.` };
  const c = (u.cost || []).find(m => m.currency === b.currency);
  if (b.cost && c && c.amount >= b.cost) return { kind: 'cost', message: `${money(c)} used of ${b.cost} ${b.currency}: prompts are refused until the budget is raised.` };
  return null;
}

function budgetText(b) {
  const parts = [];
  if (b.tokens) parts.push(`${fmt(b.tokens)} tokens`);
  if (b.cost) parts.push(`${b.cost} ${b.currency}`);
  return parts.join(', ') || 'none';
}

function tokenTitle(u) {
  const t = u.tokens || {};
  const bits = [`input ${t.input || 0}`, `output ${t.output || 0}`];
  if (t.cached_read) bits.push(`cached ${t.cached_read}`);
  if (t.thought) bits.push(`thought ${t.thought}`);
  return `${bits.join(', ')} over ${u.turns || 0} turn${u.turns === 1 ? '' : 's'} with a token count (agents that report none are not counted)`;
}
