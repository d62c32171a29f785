// DOM helpers. Everything shown goes through text nodes: strings given to h()
// become text, never HTML, so whatever an agent writes stays text.

/** h('div.cls#id', {attrs}, ...children): an element; children are nodes,
 * strings (text), numbers, arrays, or null/false (skipped). Attributes:
 * on* (functions) become listeners, class/className set the class, the
 * others are set with setAttribute, false/null skip them. */
export function h(tag, attrs, ...children) {
  let cls = [];
  let id = '';
  const m = tag.split(/(?=[.#])/);
  const el = document.createElement(m[0] || 'div');
  for (const part of m.slice(1)) {
    if (part[0] === '.') cls.push(part.slice(1));
    else id = part.slice(1);
  }
  if (id) el.id = id;
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === 'class' || k === 'className') cls.push(v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked' || k === 'disabled' || k === 'selected' || k === 'hidden') el[k] = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  if (cls.length) el.className = cls.filter(Boolean).join(' ');
  append(el, children);
  return el;
}

/** append adds children (see h) to el. */
export function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

/** clear removes every child of el and returns it. */
export function clear(el) {
  el.replaceChildren();
  return el;
}

/** ago says how long ago time t (a Date or a string) was, briefly. */
export function ago(t) {
  if (!t) return '—';
  const d = typeof t === 'string' ? new Date(t) : t;
  const s = Math.max(0, (Date.now() - d.getTime()) / 1000);
  if (!isFinite(s) || d.getFullYear() < 2000) return '—';
  if (s < 10) return 'just now';
  if (s < 60) return Math.floor(s) + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return Math.floor(s / 86400) + ' d ago';
}

/** dur formats nanoseconds (Go's time.Duration in JSON) briefly. */
export function dur(ns) {
  const s = ns / 1e9;
  if (!ns || s < 1) return '0 s';
  if (s < 60) return Math.round(s) + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min';
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
}

/** bytes formats a byte count in binary units (KiB, MiB, GiB), as the CLI does. */
export function bytes(n) {
  if (!n) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + ' ' + u[i];
}

/** toast shows a short message for a few seconds. */
export function toast(text, bad = false) {
  const box = document.getElementById('toasts');
  const t = h('div.toast', { class: bad ? 'bad' : '' }, text);
  box.appendChild(t);
  setTimeout(() => t.remove(), bad ? 8000 : 4000);
}

/** confirmDialog asks a question in the shared <dialog>; body is nodes.
 * It resolves to the value of the chosen button (null for cancel/Esc). */
export function confirmDialog(title, body, buttons) {
  const dlg = document.getElementById('confirm');
  return new Promise(resolve => {
    let value = null;
    const foot = h('div.dlg-foot');
    for (const b of buttons) {
      foot.appendChild(h('button', { type: 'button', class: b.class || '', onclick: () => { value = b.value(); dlg.close(); } }, b.label));
    }
    foot.prepend(h('button', { type: 'button', onclick: () => dlg.close() }, 'Cancel'));
    dlg.replaceChildren(h('div.dlg-head', h('h2', title)), h('div.dlg-body', body), foot);
    dlg.addEventListener('close', () => resolve(value), { once: true });
    dlg.showModal();
    const primary = foot.querySelector('button.primary, button.danger');
    (primary || foot.lastChild).focus();
  });
}

/** put replaces el's children with children (see h: arrays flatten,
 * null and false are skipped, strings are text). */
export function put(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** relPath shows path relative to the worktree root when it is inside it. */
export function relPath(root, path) {
  if (typeof path !== 'string') return path && path.path ? relPath(root, path.path) + (path.line ? ':' + path.line : '') : String(path);
  if (root && path.startsWith(root.replace(/\/$/, '') + '/')) return path.slice(root.replace(/\/$/, '').length + 1);
  return path;
}
