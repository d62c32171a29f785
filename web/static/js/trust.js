// The trust of a repository's setup file (.agentpool.json), in a session's
// view: when the file, as it is now, is not trusted, the session skipped
// its copy and setup command, and a notice shows the file's content (the
// repository's words, as text), what it would do, a button that trusts
// exactly what is shown and runs the setup, and the CLI command.
import { h, put, toast } from './dom.js';
import { api, ApiError } from './api.js';

const enc = encodeURIComponent;

/** trustNotice returns an element that shows, for session id, the notice
 * of an untrusted setup file, or nothing. */
export function trustNotice(id) {
  const el = h('div', { hidden: true });
  load();
  return el;

  async function load() {
    let sf;
    try {
      const sess = await api('GET', `/v1/sessions/${enc(id)}`);
      if (!sess || sess.status === 'closed') return;
      // missing=ok: a repository without a setup file, the usual case, is
      // an answer (missing), not a 404 in the console.
      sf = await api('GET', `/v1/trust?repo=${enc(sess.repo)}&missing=ok`);
    } catch (e) {
      return; // an old daemon (404, 501), an invalid file: nothing to trust here
    }
    if (!sf || sf.missing || sf.trusted || (!(sf.copy || []).length && !(sf.command || []).length)) {
      el.hidden = true;
      return;
    }
    render(sf);
  }

  function render(sf) {
    const why = sf.trusted_sha256 ? 'changed since it was trusted' : 'is not trusted';
    const does = [];
    if ((sf.copy || []).length) does.push(h('li', 'copy from the main checkout: ', h('span.mono', sf.copy.join(' '))));
    if ((sf.command || []).length) does.push(h('li', `run in the worktree (timeout ${sf.timeout}, confined): `, h('span.mono', sf.command.map(shq).join(' '))));
    const btn = h('button.primary', { type: 'button', onclick: () => trustAndRun(sf, btn) }, 'Trust this file and run its setup');
    const cmd = `agentpool trust ${shq(sf.repo)}`;
    put(el, h('div.trust-notice',
      h('strong', `The repository's ${sf.file} ${why}: its copy and setup command run only once you trust it.`),
      h('div.muted', `sha256 ${sf.sha256}. The file says (the repository's words, not agentpool's):`),
      h('pre.trust-content', sf.content),
      does.length ? h('ul.flush', does) : null,
      h('div.row', btn, h('span.muted', 'or in a terminal: ', h('code', cmd)))));
    el.hidden = false;
  }

  async function trustAndRun(sf, btn) {
    btn.disabled = true;
    try {
      await api('POST', '/v1/trust', { repo: sf.repo, sha256: sf.sha256 });
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) {
        toast('The file changed since it was shown: nothing was trusted. Read it again.', true);
        load();
      } else {
        toast(`Trust failed: ${e.message}`, true);
        btn.disabled = false;
      }
      return;
    }
    try {
      await api('POST', `/v1/sessions/${enc(id)}/setup`);
      toast('Trusted; the setup runs now.');
    } catch (e) {
      toast(`Trusted, but the setup did not start: ${e.message}`, true);
    }
    el.hidden = true;
  }
}

/** shq quotes s for a POSIX shell when it needs it. */
function shq(s) {
  return /^[A-Za-z0-9_\-./+,:@%=]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
