// The terminal of a terminal (PTY) agent, with @xterm/xterm over the attach
// WebSocket (GET /v1/sessions/{id}/attach). A WebSocket carries no header,
// so each connection first gets a single-use ticket (POST
// .../attach-ticket) and passes it as ?ticket=. Several viewers may watch; one
// holds the keyboard: the first keystroke asks for it ("take"), Release
// gives it back. The holder's window size becomes the terminal's.
import { h, toast, put } from './dom.js';
import * as API from './api.js';

let xtermP = null;

/** loadXterm loads the vendored library and its style sheet, once. */
function loadXterm() {
  if (!xtermP) {
    document.head.appendChild(h('link', { rel: 'stylesheet', href: '/assets/vendor/xterm/xterm.css' }));
    xtermP = import('/assets/vendor/xterm/xterm.mjs');
  }
  return xtermP;
}

export function terminalPanel(el, session, agent) {
  const status = h('span.muted', 'connecting…');
  const takeBtn = h('button.small', { type: 'button', onclick: () => typeHere() }, 'Type here');
  const reconnect = h('button.small', { type: 'button', hidden: true, onclick: () => { retries = 0; connect(); } }, 'Reconnect');
  const box = h('div.term', { 'data-terminal': '' });
  put(el, h('div.term-wrap', h('div.row', h('strong', agent || 'terminal'), status, h('span.spacer'), reconnect, takeBtn), box));

  let term = null;
  let ws = null;
  let writer = false;
  let pending = '';
  let closed = false;
  const enc = new TextEncoder();
  const ro = new ResizeObserver(() => fit());

  function setWriter(w) {
    writer = w;
    takeBtn.textContent = w ? 'Release keyboard' : 'Type here';
    status.textContent = w ? 'you are typing' : 'watching (type to take the keyboard)';
  }

  function send(obj) { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj)); }
  function take() { send({ type: 'take' }); }
  function release() { send({ type: 'release' }); }
  // typeHere is the button: it takes the keyboard and gives the focus to
  // the terminal, so that keys typed next reach the program; or releases.
  function typeHere() {
    if (writer) { release(); return; }
    take();
    if (term) term.focus();
  }

  function fit() {
    if (!term || !box.clientWidth) return;
    const probe = h('span', 'W'.repeat(40));
    probe.style.cssText = `position:absolute;visibility:hidden;white-space:pre;font-family:${term.options.fontFamily};font-size:${term.options.fontSize}px;line-height:normal`;
    document.body.appendChild(probe);
    const r = probe.getBoundingClientRect();
    probe.remove();
    const cw = r.width / 40;
    const ch = Math.ceil(r.height);
    const cols = Math.max(20, Math.floor((box.clientWidth - 12) / cw));
    const rows = Math.max(5, Math.floor((box.clientHeight - 12) / ch));
    if (cols !== term.cols || rows !== term.rows) term.resize(cols, rows);
    if (writer) send({ type: 'resize', cols: term.cols, rows: term.rows });
  }

  // A connection lost other than by the agent's exit is retried by
  // itself, each time with a new ticket, a few times with a growing delay.
  let retries = 0;
  let retryTimer = 0;
  function retry(why) {
    if (closed) return;
    if (retries >= 5) {
      status.textContent = why;
      reconnect.hidden = false;
      return;
    }
    status.textContent = `${why}: reconnecting…`;
    retryTimer = setTimeout(connect, Math.min(10000, 500 * 2 ** retries++));
  }

  async function connect() {
    clearTimeout(retryTimer);
    reconnect.hidden = true;
    status.textContent = 'connecting…';
    let tk;
    try {
      tk = await API.attachTicket(session);
    } catch (e) {
      if (e.status) { // the daemon refused: retrying will not help
        status.textContent = `cannot attach: ${e.message}`;
        reconnect.hidden = false;
      } else {
        retry('the daemon did not answer');
      }
      return;
    }
    if (closed) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = new URLSearchParams({ ticket: tk.ticket });
    if (agent) q.set('agent', agent);
    ws = new WebSocket(`${proto}//${location.host}/v1/sessions/${encodeURIComponent(session)}/attach?${q}`);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => { retries = 0; setWriter(false); };
    ws.onmessage = e => {
      if (typeof e.data !== 'string') { term.write(new Uint8Array(e.data)); return; }
      let m;
      try { m = JSON.parse(e.data); } catch { return; }
      if (m.type === 'taken') {
        setWriter(true);
        fit();
        if (pending) { ws.send(enc.encode(pending)); pending = ''; }
      } else if (m.type === 'released') {
        setWriter(false);
      } else if (m.type === 'error') {
        pending = '';
        if (m.code === 'input_held') status.textContent = 'another viewer is typing';
        else if (m.code !== 'not_writer') toast(`Terminal: ${m.message}`, true);
      }
    };
    ws.onclose = e => {
      setWriter(false);
      if (closed) return;
      if (e.reason === 'exited') {
        status.textContent = 'ended: exited';
        reconnect.hidden = false;
        return;
      }
      retry(e.reason ? `ended: ${e.reason}` : 'disconnected');
    };
  }

  loadXterm().then(({ Terminal }) => {
    if (closed) return;
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    term = new Terminal({ fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace', fontSize: 13, cursorBlink: true,
      scrollback: 5000, theme: dark ? {} : { background: '#111111' } });
    term.open(box);
    term.onData(d => {
      if (writer) { ws.send(enc.encode(d)); return; }
      pending += d;
      take();
    });
    ro.observe(box);
    fit();
    connect();
    term.focus();
  }).catch(e => { status.textContent = `the terminal library did not load: ${e.message}`; });

  return {
    close() {
      closed = true;
      clearTimeout(retryTimer);
      ro.disconnect();
      if (ws) ws.close();
      if (term) term.dispose();
    },
  };
}
