// How the machine confines agents (the confinement of GET /v1/providers),
// what that means for each provider's sandbox, and the connections the
// egress proxy refused a provider's agents: shown on the Providers page.
import { h } from './dom.js';

/** LANDLOCK_ONLY starts the daemon's warning of a machine that does not
 * let agents have namespaces of their own. */
const LANDLOCK_ONLY = 'Landlock only:';

/** landlockOnly splits that warning into what agents can reach and how to
 * fix it, without the reason the daemon appends in parentheses; null for
 * another warning. */
function landlockOnly(w, reason) {
  if (!w.startsWith(LANDLOCK_ONLY)) return null;
  let text = w;
  if (reason && text.endsWith(` (${reason})`)) text = text.slice(0, -(reason.length + 3));
  const i = text.indexOf('; ');
  if (i < 0) return { what: text, fix: '' };
  const fix = text.slice(i + 2);
  return { what: text.slice(0, i), fix: fix[0].toUpperCase() + fix.slice(1) };
}

/** commands shows the sysctl settings of text as code. */
function commands(text) {
  return text.split(/(kernel\.[\w.]+=\d+)/).map((part, i) => i % 2 ? h('code', part) : part);
}

/** confinementNotice is the banner of a machine whose agents lack a
 * protection (Landlock only, no Landlock, no cgroup); null when none is
 * missing or the daemon does not say. */
export function confinementNotice(c) {
  if (!c || !(c.warnings || []).length) return null;
  const items = [];
  let title = null;
  for (const w of c.warnings) {
    const lo = landlockOnly(w, c.namespaces_error);
    if (!lo) { items.push(h('li', w)); continue; }
    title = h('strong', lo.what + '.');
    items.push(h('li', 'Their network does not go through the egress proxy: a list of hosts in ', h('code', 'sandbox.network'),
      ' is not enforced, and a provider whose sandbox is ', h('code', '"required": true'), ' does not start.'));
    if (c.namespaces_error) items.push(h('li', 'Why: ', h('span.mono', c.namespaces_error)));
    if (lo.fix) items.push(h('li', 'To fix: ', commands(lo.fix)));
  }
  const bad = !c.landlock;
  return h('div.banner.confinement', { class: bad ? 'bad' : 'warn', role: 'status', 'data-confinement': c.namespaces ? 'namespaces' : c.landlock ? 'landlock-only' : 'none' },
    title || h('strong', bad ? 'Agents run without Landlock.' : 'Agents run with less confinement than they could.'),
    h('ul.flush', items));
}

/** networkText is a sandbox's network in a few words. */
function networkText(sb) {
  if (sb.network !== 'list') return sb.network || 'all';
  return [...(sb.ports || []).map(String), ...(sb.hosts || [])].join(', ');
}

/** sandboxLine says how a provider's agents are confined on this machine
 * (c: the daemon's confinement, null when it does not say), like the
 * SANDBOX column of providers list. */
export function sandboxLine(p, c) {
  const sb = p.sandbox || {};
  let text, cls = '';
  if (!sb.enabled) {
    text = 'off: no Landlock rules, no namespaces';
  } else if (c && !c.landlock) {
    [text, cls] = sb.required ? ['refused: its sandbox is required and this kernel has no Landlock', 'bad'] : ['unconfined: this kernel has no Landlock', 'bad'];
  } else if (c && !c.namespaces && sb.required) {
    [text, cls] = ['refused: its sandbox is required and this machine gives agents no namespaces', 'bad'];
  } else {
    text = `network ${networkText(sb)}`;
    if (c && c.namespaces) text = `confined · ${text}`;
    if (c && !c.namespaces) {
      text = `Landlock only · ${text}`;
      if (sb.network === 'list' && (sb.hosts || []).length) [text, cls] = [`${text} (not enforced: hosts need namespaces)`, 'warn'];
      else if ((sb.network === 'list' || sb.network === 'none') && c.landlock < 4) [text, cls] = [`${text} (not enforced: Landlock ABI ${c.landlock} < 4)`, 'warn'];
    }
    if (sb.required) text += ' · required';
  }
  return h('div.prov-sandbox', { class: cls, 'data-sandbox': '' }, h('span.muted', 'Sandbox: '), text);
}

/** hostPort joins a host and a port, bracketing an IPv6 address. */
export function hostPort(host, port) {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** allowHint is what "sandbox.network" to write to allow entry: the
 * provider's list with it added, or a list in place of "all". */
function allowHint(sb, entry) {
  if (sb.network !== 'list') {
    return [`Allow it with a list in place of "${sb.network || 'all'}", which allows only what it names: `, h('code', `"sandbox.network": [443, ${JSON.stringify(entry)}]`)];
  }
  const list = [...(sb.ports || []), ...(sb.hosts || []), entry].map(x => JSON.stringify(x)).join(', ');
  return ['Allow it with ', h('code', `"sandbox.network": [${list}]`)];
}

/** networkRefused lists the last connections the egress proxy refused a
 * provider's agents, the newest first, each with the list to write. */
export function networkRefused(p) {
  const list = p.network_refused || [];
  if (!list.length) return null;
  const sb = p.sandbox || {};
  return h('div.prov-refused', { 'data-network-refused': '' },
    h('strong', 'Connections refused'),
    h('ul', list.map(n => h('li',
      h('span.mono', hostPort(n.host, n.port)), `: ${n.reason}`,
      h('span.muted', ` · ${new Date(n.time).toLocaleString()}`, n.session ? [' · session ', h('a.nowrap', { href: `#/s/${encodeURIComponent(n.session)}` }, n.session)] : null),
      n.allow ? h('div.muted', allowHint(sb, n.allow)) : null))));
}
