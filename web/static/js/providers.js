// Settings → Providers: each provider's status, an enable/disable toggle
// (a JSON Merge Patch of its entry, so its other fields stay), a per-provider
// refresh (probe), the diagnostic of a broken providers.json, and the Add
// provider dialog (addprovider.js, loaded when first opened). Edits made
// to the file on disk show here within a second, through the daemon-wide
// stream's provider.changed events. A notice says when the machine
// confines agents less than it could (Landlock only), and each card how
// its agents are confined and what connections they were refused.
import { h, toast, put, confirmDialog } from './dom.js';
import * as API from './api.js';
import { store, on, refreshProviders } from './store.js';
import { CATALOG } from './catalog.js';
import { confinementNotice, sandboxLine, networkRefused } from './confinement.js';

/** installHint is how to install provider p, from the catalog: the entry
 * of the same id, or else the one whose command p runs. */
function installHint(p) {
  const cmd = (p.command || [])[0] || '';
  const c = CATALOG.find(x => x.id === p.id) || CATALOG.find(x => cmd && x.command[0] === cmd);
  return c ? c.install : '';
}

/** copyText puts text on the clipboard; where the page may not (no
 * clipboard API), it selects el's text for a manual copy. */
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

// The CLI's words (providers list), for people: "ready", not "available".
const STATUS = {
  ready: ['Ready', 'ok'],
  disabled: ['Disabled', ''],
  not_installed: ['Not installed', 'warn'],
  error: ['Error', 'bad'],
  probing: ['Probing', 'info run'],
  needs_auth: ['Needs login', 'warn'],
};

/** ORDER sorts the cards: what can be used first, then what needs the
 * user (a login, a fix, an install), disabled last; by label within. */
const ORDER = { ready: 0, probing: 1, needs_auth: 2, error: 3, not_installed: 4, disabled: 5 };

/** sorted is the providers in card order. */
function sorted(list) {
  const rank = p => ORDER[p.status] ?? 3;
  return list.slice().sort((a, b) => rank(a) - rank(b) || (a.label || a.id).localeCompare(b.label || b.id));
}

/** KIND names a provider's kind in words. */
const KIND = { acp: ['ACP agent', 'speaks the Agent Client Protocol'], pty: ['terminal agent', 'an interactive CLI that agentpool drives through a terminal'] };

/** statusBadge is a provider's status as a badge. */
export function statusBadge(p) {
  const [label, cls] = STATUS[p.status] || [p.status, ''];
  return h('span.badge', { class: cls, 'data-status': p.status }, label);
}

export function providersView(main) {
  const banner = h('div');
  const notice = h('div');
  const list = h('div.providers');
  const file = h('span.muted.mono');
  const reload = h('button', { type: 'button', onclick: async () => {
    reload.disabled = true;
    try { await API.reloadProviders(); toast('providers.json read again.'); } catch (e) { showError(e); }
    await refreshProviders().catch(() => {});
    reload.disabled = false;
  } }, 'Reload providers.json');
  const add = h('button.primary', { type: 'button', 'aria-haspopup': 'dialog', onclick: () => {
    import('./addprovider.js').then(m => m.openAddProvider({
      showCard,
      added: id => {
        const p = store.providers && store.providers.providers.find(x => x.id === id);
        toast(`Provider ${id} added${p ? `: ${(STATUS[p.status] || [p.status])[0]}` : ''}.`);
        showCard(id);
      },
    }));
  } }, 'Add provider');
  const patchErr = h('div');
  put(main, h('div.page', h('div.page-head', h('h1', 'Providers'), file, h('span.spacer'), reload, add), notice, banner, patchErr, list));

  /** showCard scrolls to a provider's card, highlights and focuses it. */
  function showCard(id) {
    const el = list.querySelector(`[data-provider="${CSS.escape(id)}"]`);
    if (!el) return;
    el.scrollIntoView({ block: 'center' });
    el.classList.remove('flash');
    void el.offsetWidth; // restart the animation
    el.classList.add('flash');
    el.tabIndex = -1;
    el.focus({ preventScroll: true });
  }

  function showError(e) {
    const diags = (e.diagnostics || []).map(d => `${d.file ? d.file + ':' : ''}${d.line ? d.line + ':' + (d.col || 0) + ': ' : ''}${d.path ? d.path + ': ' : ''}${d.message}`);
    put(patchErr, h('div.banner.bad', { role: 'alert' }, h('strong', e.message), diags.length ? h('pre', diags.join('\n')) : null));
  }

  function render() {
    const snap = store.providers;
    if (!snap) { put(list, h('div.muted', 'Loading…')); return; }
    file.textContent = snap.file || '';
    // Rebuilt only when it changes, like the cards.
    const conf = JSON.stringify(snap.confinement || null);
    if (conf !== shownConfinement) {
      shownConfinement = conf;
      put(notice, confinementNotice(snap.confinement) || '');
    }
    put(banner, snap.diagnostic ? h('div.banner.bad', { role: 'alert', 'data-diagnostic': '' },
      h('strong', 'providers.json was rejected; the last good configuration stays in force.'), h('pre', snap.diagnostic)) : '');
    // Cards are rebuilt only when their provider changed, so focus and
    // a toggle in flight survive the updates of the others.
    const next = new Map();
    const nodes = sorted(snap.providers).map(p => {
      const key = JSON.stringify(p);
      const old = cards.get(p.id);
      const el = old && old.key === key ? old.el : card(p);
      next.set(p.id, { key, el });
      return el;
    });
    cards = next;
    nodes.forEach((el, i) => { if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null); });
    while (list.children.length > nodes.length) list.lastChild.remove();
  }
  let cards = new Map();
  let shownConfinement = '';

  function card(p) {
    const toggle = h('input', { type: 'checkbox', checked: p.enabled, 'aria-label': `Enable ${p.label || p.id}`, onchange: async () => {
      toggle.disabled = true;
      put(patchErr);
      try {
        await API.patchProvider(p.id, { enabled: toggle.checked });
        await refreshProviders();
      } catch (e) {
        toggle.checked = !toggle.checked;
        showError(e);
      } finally {
        toggle.disabled = false;
      }
    } });
    const probe = h('button.small', { type: 'button', disabled: !p.enabled,
      title: p.status === 'not_installed' ? 'Look for the command again (after installing it) and ask the agent what it offers' : 'Start the agent, ask what it offers, stop it', onclick: async () => {
      probe.disabled = true;
      probe.textContent = 'Refreshing…';
      try {
        const info = await API.probeProvider(p.id);
        toast(`${p.label || p.id}: ${info.agent_name || 'agent'} ${info.agent_version || ''} answered in ${Math.round((info.duration || 0) / 1e6)} ms`);
      } catch (e) {
        toast(`${p.label || p.id}: ${e.message}`, true);
      }
      await refreshProviders().catch(() => {});
    } }, 'Refresh');
    const remove = p.built_in ? null : h('button.small.danger', { type: 'button', 'data-remove': '', 'aria-label': `Remove ${p.label || p.id}`, onclick: async () => {
      const name = p.label || p.id;
      const ok = await confirmDialog(`Remove provider ${name}?`, [
        h('p.flush', ['Deletes the entry ', h('code', p.id), ' from providers.json.']),
        h('p.flush.muted', 'Sessions whose agent it is keep an agent that is running, but it cannot start again for them. To keep the entry, disable it instead.'),
      ], [{ label: 'Remove', class: 'danger solid', value: () => true }]);
      if (!ok) return;
      put(patchErr);
      try {
        await API.removeProvider(p.id);
        toast(`Provider ${name} removed.`);
      } catch (e) {
        showError(e);
      }
      await refreshProviders().catch(() => {});
    } }, 'Remove');
    const probeInfo = p.probe && !p.probe.error ? `${p.probe.agent_name || ''} ${p.probe.agent_version || ''}`.trim() : '';
    return h('div.panel.prov', { 'data-provider': p.id },
      h('div.name', p.label || p.id, h('span.id', p.id), statusBadge(p),
        h('span.badge.plain', { 'data-kind': p.kind, title: (KIND[p.kind] || [])[1] || '' }, (KIND[p.kind] || [p.kind])[0]), p.built_in ? null : h('span.badge.plain.info', 'custom')),
      h('div.controls', probe, remove, h('label.switch', toggle, h('span', p.enabled ? 'Enabled' : 'Disabled'))),
      p.description ? h('div.desc', p.description)
        : p.kind === 'pty' ? h('div.desc', `a terminal agent: agentpool runs ${(p.command || [])[0] || 'its command'} in a terminal, types your prompts into it and reads its answers from the screen`)
          : null,
      p.diagnostic && p.status !== 'disabled' ? h('div.diag', p.diagnostic) : null,
      p.status === 'needs_auth' ? loginControls(p) : null,
      p.status === 'not_installed' ? installLine(p) : null,
      sandboxLine(p, store.providers && store.providers.confinement),
      networkRefused(p),
      sandboxNotes(p),
      envNotes(p),
      h('div.cmd', (p.path || (p.command || []).join(' ')) + (probeInfo ? `  ·  ${probeInfo}` : '')));
  }

  // loginControls offers the agent's ways to log in: the daemon asks the
  // agent itself for an "agent" method; the others are the user's to do,
  // in a terminal or the daemon's environment, and are shown as such.
  function loginControls(p) {
    const methods = (p.probe && p.probe.auth) || [];
    const items = methods.map(m => {
      if (m.type === 'agent') {
        const b = h('button.small.primary', { type: 'button', onclick: async () => {
          b.disabled = true;
          b.textContent = 'Logging in… (finish it where the agent sends you)';
          try {
            const st = await API.loginAgent(p.id, m.id);
            toast(st.status === 'needs_auth' ? `${p.label || p.id} still needs a login.` : `${p.label || p.id} is logged in.`, st.status === 'needs_auth');
          } catch (e) {
            toast(`${p.label || p.id}: ${e.message}`, true);
          }
          await refreshProviders().catch(() => {});
        } }, `Log in: ${m.name}`);
        return h('li', b, m.description ? h('div.muted', m.description) : null);
      }
      if (m.type === 'terminal') {
        return h('li', h('strong', `${m.name}: `), 'run ', h('code', `agentpool login ${p.id} --method ${m.id}`), ' in your terminal');
      }
      return h('li', h('strong', `${m.name}: `), 'set ', h('code', (m.vars || []).join(', ')), ' in the daemon\'s environment or the provider\'s env',
        // The agent's words: a link only when it is http(s).
        /^https?:\/\//i.test(m.link || '') ? [' (', h('a', { href: m.link, target: '_blank', rel: 'noopener noreferrer' }, 'get them'), ')'] : null);
    });
    if (items.length) return h('div.diag', { 'data-login': '' }, h('ul', ...items));
    // No way to log in through agentpool: the diagnostic above has the
    // agent's own words; here is the command they name, if any.
    const cmd = p.probe && p.probe.login_command;
    return cmd ? h('div.diag', { 'data-login': '' }, 'Log in with ', h('code', cmd), ' in your terminal, then Refresh.') : null;
  }

  // installLine shows the catalog's install command of a provider that is
  // not installed, with a Copy button.
  function installLine(p) {
    const cmd = installHint(p);
    if (!cmd) return null;
    const code = h('code', cmd);
    return h('div.prov-install', { 'data-install': '' }, h('span.muted', 'Install: '), code,
      h('button.small', { type: 'button', 'aria-label': `Copy the install command of ${p.label || p.id}`, onclick: () => copyText(cmd, code) }, 'Copy'));
  }

  // sandboxNotes shows the grants the sandbox refuses and the paths it
  // denied at the last launch, each with what to change.
  function sandboxNotes(p) {
    const say = (what, n) => h('li', h('strong', `${what} ${n.entry || 'command'} `), h('code', n.path), `: ${n.reason}`,
      n.fix ? h('div.muted', n.fix) : null);
    const items = (p.sandbox_notes || []).map(n => say('Refused', n));
    const l = p.last_launch;
    if (l) {
      const known = new Set((p.sandbox_notes || []).map(n => n.path + '\0' + n.entry));
      (l.refused || []).filter(n => !known.has(n.path + '\0' + n.entry)).forEach(n => items.push(say(`Refused (session ${l.session})`, n)));
      (l.denied || []).forEach(n => items.push(say(`Denied at start (session ${l.session})`, n)));
    }
    return items.length ? h('div.diag', { 'data-sandbox-notes': '' }, h('ul', ...items)) : null;
  }

  // envNotes says what of the provider's environment its agents do not
  // get (proxy variables, variables only the owner may pass), and why.
  function envNotes(p) {
    const items = (p.env_notes || []).map(n => h('li', n));
    return items.length ? h('div.diag', { 'data-env-notes': '' }, h('ul', ...items)) : null;
  }

  render();
  refreshProviders().catch(() => {});
  return on(topic => { if (topic === 'providers') render(); });
}
