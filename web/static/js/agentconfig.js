// The composer's agent controls: a model picker and a mode picker (shown
// only when the agent offers them), kept live from the session's mode,
// config and commands events, and the completion of "/" commands in the
// prompt box.
import { h, put, toast } from './dom.js';
import * as API from './api.js';

/** modelOption is the agent's model selector: the option of category
 * "model", else the one whose id is "model". */
function modelOption(cfg) { return selectOption(cfg, 'model'); }

/** selectOption is the agent's select option of category key, else the
 * one whose id is key. */
function selectOption(cfg, key) {
  const opts = ((cfg && cfg.options) || []).filter(o => o.type === 'select');
  return opts.find(o => o.category === key) || opts.find(o => o.id === key) || null;
}

/** agentControls returns the pickers (el), the completion list (menu) for
 * textarea text, and hooks for the session view: onEvent(ev) for each
 * event, agentChanged() when the composer's agent changes, and
 * handleKey(e), to be called first on the textarea's keydown, which says
 * whether it took the key. agent() is the composer's agent. */
export function agentControls(id, text, agent) {
  let cfg = null;
  let seq = 0;
  let timer = 0;
  const model = h('select.cfg-model', { 'aria-label': 'Model', onchange: () => set({ options: { [model.dataset.option]: model.value } }) });
  const mode = h('select.cfg-mode', { 'aria-label': 'Mode', onchange: () => set({ mode: mode.value }) });
  const modelLabel = h('label.row.muted.cfg', { hidden: true }, 'Model', model);
  const modeLabel = h('label.row.muted.cfg', { hidden: true }, 'Mode', mode);
  const el = h('span.row.cfg-pickers', modelLabel, modeLabel);
  const menu = h('ul.cmd-menu', { role: 'listbox', hidden: true, 'aria-label': 'Slash commands' });
  let matches = [];
  let sel = 0;

  async function load() {
    const a = agent();
    const my = ++seq;
    if (!a) return;
    try {
      const c = await API.agentConfig(id, a);
      if (my === seq) { cfg = c; render(); }
    } catch {
      if (my === seq) { cfg = null; render(); }
    }
  }
  function loadSoon() { clearTimeout(timer); timer = setTimeout(load, 100); }

  function fill(select, items, current) {
    put(select, items.map(it => h('option', { value: it.value, selected: it.value === current, title: it.title || '' }, it.label)));
    select.value = current;
  }

  function render() {
    const m = modelOption(cfg);
    modelLabel.hidden = !m || !(m.choices || []).length;
    if (m) {
      model.dataset.option = m.id;
      fill(model, (m.choices || []).map(c => ({ value: c.value, label: c.group ? `${c.group}: ${c.name || c.value}` : (c.name || c.value), title: c.description })), m.current);
    }
    let modes = ((cfg && cfg.modes && cfg.modes.available) || []).map(x => ({ value: x.id, label: x.name || x.id, title: x.description }));
    let current = (cfg && cfg.modes && cfg.modes.current) || '';
    const mo = selectOption(cfg, 'mode');
    if (!modes.length && mo) {
      // The agent offers its modes as a config option; the pool sets a
      // mode through it.
      modes = (mo.choices || []).map(c => ({ value: c.value, label: c.name || c.value, title: c.description }));
      current = mo.current;
    }
    modeLabel.hidden = !modes.length;
    fill(mode, modes, current);
    updateMenu();
  }

  async function set(change) {
    const a = agent();
    model.disabled = mode.disabled = true;
    try {
      const r = await API.setAgentConfig(id, a, change);
      cfg = r;
      if (!r.applied) toast(`${a}: ${r.note}.`);
    } catch (e) {
      toast(`Could not change ${a}: ${e.message}`, true);
    } finally {
      model.disabled = mode.disabled = false;
      render();
    }
  }

  // Completion of "/" commands: while the box holds only "/word", the
  // agent's commands starting with word are listed.
  function updateMenu() {
    const v = text.value;
    const m = /^\/(\S*)$/.exec(v.slice(0, text.selectionEnd ?? v.length));
    const cmds = (cfg && cfg.commands) || [];
    matches = m && !/\s/.test(v) ? cmds.filter(c => c.name.startsWith(m[1])) : [];
    if (!matches.length) { closeMenu(); return; }
    sel = Math.min(sel, matches.length - 1);
    put(menu, matches.map((c, i) => h('li', { role: 'option', 'aria-selected': String(i === sel), class: i === sel ? 'active' : '', 'data-command': c.name,
      onmousedown: e => { e.preventDefault(); complete(i); } },
    h('span.cmd-name', '/' + c.name), c.hint ? h('span.cmd-hint', c.hint) : null, h('span.cmd-desc', c.description || ''))));
    menu.hidden = false;
  }
  function closeMenu() { menu.hidden = true; matches = []; sel = 0; }
  function complete(i) {
    const c = matches[i];
    if (!c) return;
    text.value = '/' + c.name + ' ';
    text.setSelectionRange(text.value.length, text.value.length);
    closeMenu();
    text.focus();
  }
  text.addEventListener('input', () => {
    sel = 0;
    updateMenu();
  });
  text.addEventListener('blur', () => closeMenu());

  function handleKey(e) {
    if (menu.hidden || !matches.length) return false;
    switch (e.key) {
      case 'ArrowDown': sel = (sel + 1) % matches.length; break;
      case 'ArrowUp': sel = (sel - 1 + matches.length) % matches.length; break;
      case 'Enter': case 'Tab':
        if (e.shiftKey || e.isComposing) return false;
        complete(sel);
        break;
      case 'Escape': closeMenu(); break;
      default: return false;
    }
    e.preventDefault();
    if (!menu.hidden) updateMenuSel();
    return true;
  }
  function updateMenuSel() {
    [...menu.children].forEach((li, i) => { li.classList.toggle('active', i === sel); li.setAttribute('aria-selected', String(i === sel)); });
    const li = menu.children[sel];
    if (li) li.scrollIntoView({ block: 'nearest' });
  }

  function onEvent(ev) {
    if (ev.agent && ev.agent !== agent()) return;
    if (['mode', 'config', 'commands', 'agent.ready'].includes(ev.type)) loadSoon();
  }

  load();
  return { el, menu, onEvent, agentChanged: () => { cfg = null; render(); load(); }, handleKey, close: () => clearTimeout(timer) };
}
