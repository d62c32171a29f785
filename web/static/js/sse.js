// A Server-Sent Events reader over fetch, so that the stream carries the
// page's run bearer in the Authorization header (EventSource cannot send
// headers, and the page has no cookie). It parses id:, event: and data:
// lines, and reconnects by itself with a growing delay; path(...) is asked
// for the URL again before each connection, so a stream can resume after
// the last event it saw (?after=). A stream that ends or fails drops the
// run bearer it used: the daemon may have stopped, and whatever holds its
// port next must prove itself before the page sends anything again.
import { dropBearer } from './auth.js';
import { bearerHeaders, unauthorized } from './api.js';

const minDelay = 500;
const maxDelay = 10000;
const authRetryDelay = 4000; // while the daemon cannot prove itself

/** openStream reads the stream at path() until closed. Callbacks:
 * onEvent(type, data, id), onOpen(), onDown() (the connection ended; it
 * will retry), and stop(status) (a refusal other than 401: return true to
 * stop retrying). It returns { close() }. */
export function openStream(path, { onEvent, onOpen = () => {}, onDown = () => {}, stop = () => false }) {
  let closed = false;
  let ctl = null;
  let timer = 0;
  let delay = minDelay;
  let refused = 0; // 401s in a row

  async function run() {
    if (closed) return;
    ctl = new AbortController();
    let opened = false;
    let bearer = '';
    try {
      const auth = await bearerHeaders(); // throws, sending nothing, while the daemon cannot prove itself
      bearer = auth.bearer;
      if (closed) return;
      const resp = await fetch(path(), { headers: { Accept: 'text/event-stream', ...auth.headers }, credentials: 'omit',
        cache: 'no-store', signal: ctl.signal });
      if (resp.status === 401) {
        dropBearer(bearer);
        if (!bearer || refused++) { closed = true; unauthorized(); return; }
        timer = setTimeout(run, 0); // authenticate again, once
        return;
      }
      refused = 0;
      if (!resp.ok || !resp.body) {
        if (stop(resp.status)) { closed = true; return; }
        throw new Error(`HTTP ${resp.status}`);
      }
      opened = true;
      delay = minDelay;
      onOpen();
      await read(resp.body);
    } catch (e) {
      if (closed) return;
      if (e && e.status === 401) { closed = true; return; } // the login help is shown
      if (e && e.kind) delay = Math.min(delay, authRetryDelay); // the banner says it retries
    }
    if (closed) return;
    dropBearer(bearer);
    if (opened) onDown();
    timer = setTimeout(run, delay);
    delay = Math.min(maxDelay, delay * 2);
  }

  async function read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { type: '', data: [], id: '' };
    for (;;) {
      const { value, done } = await reader.read();
      if (done || closed) { if (closed) reader.cancel().catch(() => {}); return; }
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, buf[nl - 1] === '\r' ? nl - 1 : nl);
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (ev.data.length) onEvent(ev.type || 'message', ev.data.join('\n'), ev.id);
          ev = { type: '', data: [], id: '' };
          continue;
        }
        if (line[0] === ':') continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val[0] === ' ') val = val.slice(1);
        if (field === 'event') ev.type = val;
        else if (field === 'data') ev.data.push(val);
        else if (field === 'id') ev.id = val;
      }
    }
  }

  run();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      if (ctl) ctl.abort();
    },
  };
}
