// Providers → Add provider: the catalog of ACP agents (GET /v1/catalog:
// the ACP registry's agents, which are built in, which were added, the
// version and install step of each) and a form that adds a custom
// provider to providers.json with PATCH /v1/providers/{id} and "extends".
// The daemon validates the entry; its diagnostics (JSON path, message) show
// in the dialog. The dialog is a modal <dialog>: Tab moves through it, Esc
// closes it, Enter in a field adds the provider.
import { h, put, toast } from './dom.js';
import * as API from './api.js';
import { store, refreshProviders } from './store.js';
import { CATALOG, catalogSource, loadCatalog } from './catalog.js';
import { statusBadge } from './providers.js';

/** splitCommand splits a command line into arguments, as a POSIX shell
 * would for plain words, '…' and "…" quotes and backslash escapes. */
export function splitCommand(s) {
  const out = [];
  let cur = '';
  let word = false;
  let quote = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (quote) {
      if (c === quote) quote = '';
      else if (c === '\\' && quote === '"' && i + 1 < s.length && '"\\$`'.includes(s[i + 1])) cur += s[++i];
      else cur += c;
    } else if (c === '"' || c === "'") {
      quote = c;
      word = true;
    } else if (c === '\\' && i + 1 < s.length) {
      cur += s[++i];
      word = true;
    } else if (/\s/.test(c)) {
      if (word) out.push(cur);
      cur = '';
      word = false;
    } else {
      cur += c;
      word = true;
    }
  }
  if (quote) throw new Error(`the ${quote === '"' ? 'double' : 'single'} quote is not closed`);
  if (word) out.push(cur);
  return out;
}

/** joinCommand is the inverse of splitCommand, quoting where needed. */
export function joinCommand(args) {
  return args.map(a => (/^[\w@%+=:,./~-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** parseEnv reads NAME=value lines (blank lines and # comments skipped). */
export function parseEnv(text) {
  const env = {};
  text.split('\n').forEach((line, i) => {
    const t = line.trim();
    if (!t || t.startsWith('#')) return;
    const eq = t.indexOf('=');
    const name = eq > 0 ? t.slice(0, eq).trim() : '';
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`line ${i + 1}: want NAME=value, got "${t}"`);
    env[name] = t.slice(eq + 1).trim();
  });
  return env;
}

/** installedAs is the provider that runs catalog entry c: the built-in of
 * its id, the provider of its id, or another with the same command. */
function installedAs(c, providers) {
  const byId = providers.find(p => p.id === c.id);
  if (byId) return byId;
  const cmd = joinCommand(c.command);
  return providers.find(p => p.command && p.command.length && joinCommand(p.command) === cmd) || null;
}

/** copyText puts text on the clipboard; where the page may not, it
 * selects el's text for a manual copy. */
async function copyText(text, el) {
  try {
    await navigator.clipboard.writeText(text);
    toast('Install command copied.');
  } catch {
    const r = document.createRange();
    r.selectNodeContents(el);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(r);
    toast('Select and copy the command: the browser refused the clipboard.');
  }
}

/** openAddProvider opens the dialog. showCard(id) closes it and shows a
 * provider's card; added(id) runs after a provider was added. */
export function openAddProvider({ showCard, added }) {
  const providers = (store.providers && store.providers.providers) || [];
  const dlg = h('dialog.addprov', { 'aria-labelledby': 'addprov-title' });

  // The custom provider form.
  const field = (name, attrs) => h('input', { type: 'text', name, autocomplete: 'off', spellcheck: 'false', ...attrs });
  const id = field('id', { placeholder: 'e.g. amp', required: true, 'aria-describedby': 'addprov-id-hint' });
  const label = field('label', { placeholder: 'e.g. Amp' });
  const kind = h('select', { name: 'extends' },
    h('option', { value: 'acp' }, 'ACP agent (speaks ACP on stdin and stdout)'),
    h('option', { value: 'pty' }, 'Terminal program (driven through its screen)'));
  const command = field('command', { class: 'mono', placeholder: 'e.g. amp-acp', required: true });
  const env = h('textarea', { name: 'env', rows: 3, class: 'mono', spellcheck: 'false', placeholder: 'NAME=value, one per line' });
  const errors = h('div.form-errors', { role: 'alert' });
  const fields = { id, label, extends: kind, command, env };
  const submit = h('button.primary', { type: 'submit' }, 'Add provider');
  const customHead = h('h3', 'Custom provider');

  function use(c) {
    id.value = c.id;
    label.value = c.name;
    kind.value = 'acp';
    command.value = joinCommand(c.command);
    env.value = Object.entries(c.env || {}).map(([k, v]) => `${k}=${v}`).join('\n');
    showErrors(null);
    id.scrollIntoView({ block: 'nearest' });
    id.focus();
    id.select();
  }

  /** showErrors shows what is wrong: [{path, message}] with a headline. */
  function showErrors(headline, list = []) {
    for (const el of Object.values(fields)) el.removeAttribute('aria-invalid');
    if (!headline) { put(errors); return; }
    for (const d of list) {
      const el = fieldOf(d.path || '');
      if (el) el.setAttribute('aria-invalid', 'true');
    }
    put(errors, h('div.banner.bad', h('strong', headline),
      list.length ? h('ul.diags', list.map(d => h('li', d.path ? h('code', d.path) : null, d.path ? ': ' : '', d.message))) : null));
    customHead.scrollIntoView({ block: 'start' });
    const first = list.map(d => fieldOf(d.path || '')).find(Boolean);
    if (first) first.focus({ preventScroll: true });
  }

  /** fieldOf is the form field a diagnostic's JSON path points at. */
  function fieldOf(path) {
    const m = path.match(/^providers(?:\.[\w$-]+|\[".*?"\])(?:\.([a-z_]+))?/) || path.match(/^([a-z_]+)$/);
    if (!m) return null;
    return m[1] ? fields[m[1]] || null : id;
  }

  async function onSubmit(e) {
    e.preventDefault();
    const want = id.value.trim();
    const problems = [];
    if (!want) problems.push({ path: 'id', message: 'an id is required: it names the provider in prompts and in providers.json' });
    else if (providers.some(p => p.id === want)) problems.push({ path: 'id', message: `provider "${want}" exists already: choose another id, or change that one on its card or in providers.json` });
    let argv = [];
    try { argv = splitCommand(command.value.trim()); } catch (err) { problems.push({ path: 'command', message: err.message }); }
    if (!argv.length && !problems.some(p => p.path === 'command')) problems.push({ path: 'command', message: 'a command is required: the program and its arguments' });
    let vars = {};
    try { vars = parseEnv(env.value); } catch (err) { problems.push({ path: 'env', message: err.message }); }
    if (problems.length) { showErrors('Check the form:', problems); return; }
    const patch = { extends: kind.value, command: argv };
    if (label.value.trim()) patch.label = label.value.trim();
    if (Object.keys(vars).length) patch.env = vars;
    submit.disabled = true;
    submit.textContent = 'Adding…';
    try {
      await API.patchProvider(want, patch);
      await refreshProviders().catch(() => {});
      dlg.close();
      added(want);
    } catch (err) {
      const diags = err.diagnostics || [];
      showErrors(diags.length ? 'The daemon refused the provider:' : `The daemon refused the provider: ${err.message}`, diags.map(d => ({
        path: d.path, message: d.message + (d.line && !/merge patch|as patched/.test(d.file || '') ? ` (${d.file}:${d.line}:${d.col})` : ''),
      })));
    } finally {
      submit.disabled = false;
      submit.textContent = 'Add provider';
    }
  }

  /** entry is one catalog agent: name, version, where it is configured,
   * its command, install step (with Copy), environment and note. */
  function entry(c) {
    const p = installedAs(c, providers);
    const action = p
      ? h('button.small', { type: 'button', onclick: () => { dlg.close(); showCard(p.id); } }, 'See its card')
      : c.unavailable ? null
        : h('button.small', { type: 'button', 'aria-label': `Use ${c.name} for a new provider`, onclick: () => use(c) }, 'Use');
    const where = p ? [p.built_in ? h('span.badge.plain', 'built-in') : h('span.badge.plain.info', `added as ${p.id}`), statusBadge(p)] : null;
    const install = c.install ? h('code', c.install) : null;
    return h('li', { 'data-catalog': c.id, 'data-registry-id': c.registryId },
      h('div.cat-head', h('strong', c.name), c.version ? h('span.muted.cat-version', `v${c.version}`) : null, where,
        c.command.length ? h('code.cmd', joinCommand(c.command)) : null),
      h('div.cat-action', action),
      install ? h('div.cat-install', install, h('button.small.link', { type: 'button', 'aria-label': `Copy the install command of ${c.name}`,
        onclick: () => copyText(c.install, install) }, 'Copy')) : null,
      c.unavailable ? h('div.cat-note.warn', c.unavailable) : null,
      c.env ? h('div.cat-env', 'Environment: ', Object.entries(c.env).map(([k, v]) => h('code', `${k}=${v}`))) : null,
      c.note || c.description ? h('div.cat-note', c.note || c.description) : null);
  }

  const source = h('div.muted.cat-source');
  const catalog = h('ul.catalog');
  let shown = '';
  /** showCatalog renders CATALOG, unless it is what is shown already. */
  function showCatalog() {
    const now = JSON.stringify([CATALOG, catalogSource]);
    if (now === shown) return;
    shown = now;
    catalog.removeAttribute('aria-busy');
    put(source, catalogSource.source === 'file'
      ? `The ACP registry's agents, from ${catalogSource.file}.`
      : 'The ACP registry\'s agents, as built into agentpool. agentpool providers catalog --from FILE|URL reads a newer registry.json.');
    put(catalog, CATALOG.length ? CATALOG.map(entry) : h('li.muted', 'The catalog is empty.'));
  }
  // What was loaded with this module shows at once; the daemon's current
  // catalog replaces it when it differs (it may have been replaced since).
  if (CATALOG.length) showCatalog();
  else {
    catalog.setAttribute('aria-busy', 'true');
    put(catalog, h('li.muted', 'Loading the catalog…'));
  }
  loadCatalog({ force: true }).then(() => {
    const active = document.activeElement;
    // The first catalog button gets the focus when the catalog arrives
    // late, or when a re-render took the focused button away.
    const focusFirst = catalog.contains(active) || (!shown && !id.value && (active === id || !dlg.contains(active)));
    showCatalog();
    if (catalog.contains(document.activeElement)) return;
    const first = catalog.querySelector('button');
    if (first && focusFirst) first.focus();
  }, err => {
    catalog.removeAttribute('aria-busy');
    if (!shown) put(catalog, h('li.banner.bad', `The catalog could not be read: ${err.message}`));
  });

  const form = h('form', { onsubmit: onSubmit, novalidate: true },
    h('div.dlg-head', h('h2#addprov-title', 'Add provider'),
      h('div.muted', 'Coding agents that speak ACP (the Agent Client Protocol). A built-in one needs only its install. ' +
        'For any other, press Use to fill in the form below, or describe your own there; it is added to providers.json.')),
    h('div.dlg-body',
      h('h3', 'Catalog'),
      source,
      catalog,
      customHead,
      errors,
      h('div.addprov-grid',
        h('label.field', 'ID', h('span.hint#addprov-id-hint', 'lowercase letters, digits, - _ .'), id),
        h('label.field', 'Label', h('span.hint', 'shown on its card'), label),
        h('label.field.span2', 'Kind', kind),
        h('label.field.span2', 'Command', h('span.hint', 'the program, found on the daemon\'s PATH, and its arguments; quote an argument that holds spaces'), command),
        h('label.field.span2', 'Environment', h('span.hint', 'added to the agent\'s environment; stored in providers.json'), env))),
    h('div.dlg-foot', h('button', { type: 'button', onclick: () => dlg.close() }, 'Cancel'), submit));
  dlg.appendChild(form);
  dlg.addEventListener('close', () => dlg.remove());
  document.body.appendChild(dlg);
  dlg.showModal();
  const first = catalog.querySelector('button');
  if (first) first.focus();
  return dlg;
}
