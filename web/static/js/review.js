// Review back to the agent, and the way out to a pull request. In the
// whole session's diff, a click on a line opens a comment box; the
// pending comments are listed under the diff and "Send review" posts them
// (POST /v1/sessions/{id}/review), which becomes the agent's next prompt.
// A turn that answered a review lists its comments by location, each
// marked addressed or not once the turn has ended. The session's head
// links its pull request and shows the CLI commands that push the branch
// and open one: git push and gh run in the user's own environment, never
// in the daemon.
import { h, put, toast } from './dom.js';
import * as API from './api.js';

/** pending holds the comments not yet sent, by session, across renders. */
const pending = new Map();

const pendingOf = id => {
  if (!pending.has(id)) pending.set(id, []);
  return pending.get(id);
};

/** parsePatch yields each line of a unified diff with its file and line
 * numbers: { text, cls, path, side, line } (path empty for headers). */
function* parsePatch(patch) {
  let path = '', oldNo = 0, newNo = 0, inHunk = false;
  for (const l of patch.split('\n')) {
    if (l.startsWith('diff ')) { inHunk = false; path = ''; yield { text: l, cls: 'f' }; continue; }
    if (!inHunk && l.startsWith('--- ')) { const p = l.slice(4); if (p !== '/dev/null') path = p.replace(/^a\//, ''); yield { text: l, cls: 'f' }; continue; }
    if (!inHunk && l.startsWith('+++ ')) { const p = l.slice(4); if (p !== '/dev/null') path = p.replace(/^b\//, ''); yield { text: l, cls: 'f' }; continue; }
    const m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(l);
    if (m) {
      inHunk = true;
      oldNo = +m[1] + (m[2] === '0' ? 1 : 0);
      newNo = +m[3] + (m[4] === '0' ? 1 : 0);
      yield { text: l, cls: 'h' };
      continue;
    }
    if (inHunk && l[0] === '+') { yield { text: l, cls: 'a', path, side: 'new', line: newNo++ }; continue; }
    if (inHunk && l[0] === '-') { yield { text: l, cls: 'd', path, side: 'old', line: oldNo++ }; continue; }
    if (inHunk && l[0] === ' ') { yield { text: l, cls: '', path, side: 'new', line: newNo++ }; oldNo++; continue; }
    yield { text: l, cls: '' };
  }
}

const where = c => `${c.path}:${c.line}${c.side === 'old' ? ' (removed line)' : ''}`;

/** reviewDiff renders session id's whole diff with commentable lines, the
 * pending comments and the Send review form; onSent(turn) runs once the
 * review was accepted. */
export function reviewDiff(id, patch, onSent) {
  const pre = h('pre.reviewable');
  const list = h('div.review-pending');
  const max = 20000;
  const lines = [...parsePatch(patch)];
  for (const l of lines.slice(0, max)) {
    const s = document.createElement('span');
    if (l.cls) s.className = l.cls;
    s.textContent = l.text || ' ';
    if (l.path && l.line) {
      s.dataset.path = l.path;
      s.dataset.line = l.line;
      s.dataset.side = l.side;
      s.title = `Comment on ${where(l)}`;
      s.tabIndex = 0;
      s.addEventListener('click', () => openBox(s, l));
      s.addEventListener('keydown', e => { if (e.key === 'Enter') openBox(s, l); });
    }
    pre.appendChild(s);
  }
  if (lines.length > max) pre.appendChild(h('span.h', `… ${lines.length - max} more lines`));

  function openBox(after, l) {
    const open = pre.querySelector('.comment-box');
    if (open) open.remove();
    const text = h('textarea', { name: 'comment', rows: 3, placeholder: `Comment on ${where(l)}…` });
    const box = h('div.comment-box', { 'data-for': `${l.path}:${l.line}:${l.side}` },
      h('div.muted', `Comment on ${where(l)}`), text,
      h('div.row', h('span.spacer'),
        h('button', { type: 'button', onclick: () => box.remove() }, 'Cancel'),
        h('button.primary', { type: 'button', 'data-add-comment': '', onclick: add }, 'Add comment')));
    function add() {
      const t = text.value.trim();
      if (!t) { text.focus(); return; }
      pendingOf(id).push({ path: l.path, line: l.line, side: l.side, text: t });
      box.remove();
      renderPending();
    }
    text.addEventListener('keydown', e => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) add(); if (e.key === 'Escape') box.remove(); });
    after.after(box);
    text.focus();
  }

  const summary = h('textarea', { name: 'summary', rows: 2, placeholder: 'Overall comment (optional)' });
  const sendBtn = h('button.primary', { type: 'button', 'data-send-review': '', onclick: send }, 'Send review');
  async function send() {
    const comments = pendingOf(id);
    if (!comments.length) return;
    sendBtn.disabled = true;
    try {
      const turn = await API.review(id, { comments, summary: summary.value.trim() || undefined });
      pending.set(id, []);
      summary.value = '';
      renderPending();
      toast(`Review sent as turn ${turn.id}.`);
      onSent(turn);
    } catch (e) {
      const m = /^comments\[(\d+)\]/.exec(e.field || '');
      toast(m ? `Comment ${+m[1] + 1}: ${e.message}` : e.message, true);
    } finally {
      sendBtn.disabled = false;
    }
  }

  function renderPending() {
    const comments = pendingOf(id);
    for (const s of pre.querySelectorAll('span.commented')) s.classList.remove('commented');
    for (const c of comments) {
      const s = pre.querySelector(`span[data-path="${CSS.escape(c.path)}"][data-line="${c.line}"][data-side="${c.side}"]`);
      if (s) s.classList.add('commented');
    }
    if (!comments.length) {
      put(list, h('div.muted.review-hint', 'Click a line of the diff to comment on it; your comments go to the agent together as its next prompt.'));
      return;
    }
    put(list, h('h3', `Review: ${comments.length} comment${comments.length === 1 ? '' : 's'}`),
      h('ul.review-comments', comments.map((c, i) => h('li', { 'data-pending': `${c.path}:${c.line}` },
        h('span.mono.loc', where(c)), h('span.grow.text', c.text),
        h('button.small.ghost', { type: 'button', title: 'Remove this comment', onclick: () => { comments.splice(i, 1); renderPending(); } }, 'Remove')))),
      summary, h('div.row', h('span.spacer'), sendBtn));
  }
  renderPending();
  return [h('div.diff', pre), list];
}

/** reviewResult lists the comments of the review a turn answered, each
 * with whether the turn addressed it; null without a review. */
export function reviewResult(turn) {
  const r = turn && turn.review;
  if (!r) return null;
  const state = c => {
    if (c.addressed == null) return h('span.badge.info', { 'data-addressed': 'pending' }, turn.ended_at ? 'not judged' : 'turn running');
    if (c.addressed) return h('span.badge.ok', { 'data-addressed': 'yes', title: c.addressed_by === 'reply' ? 'the reply names this location' : 'the turn changed lines at or near it' },
      c.addressed_by === 'reply' ? 'addressed (named in reply)' : 'addressed (changed)');
    return h('span.badge.warn', { 'data-addressed': 'no' }, 'not addressed');
  };
  return h('div.review-result', { 'data-review-turn': turn.id },
    h('h3', `Review answered by turn ${turn.id}`),
    r.summary ? h('p.flush', r.summary) : null,
    h('ul.review-comments', r.comments.map(c => h('li', { 'data-comment': `${c.path}:${c.line}` },
      h('span.mono.loc', where(c)), h('span.grow.text', c.text), state(c)))));
}

/** copyText puts text on the clipboard; where the page may not, it
 * selects el's text for a manual copy. */
async function copyText(text, el) {
  try {
    await navigator.clipboard.writeText(text);
    toast('Command copied.');
  } catch {
    const r = document.createRange();
    r.selectNodeContents(el);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(r);
    toast('Select and copy the command: the browser refused the clipboard.');
  }
}

/** shipBox is the session's pull request link, and the commands that push
 * its branch and open a pull request from the user's own terminal. */
export function shipBox(s) {
  if (!s) return null;
  const cmd = c => {
    const code = h('code.mono', c);
    return h('div.cmd-row', code, h('button.small', { type: 'button', 'data-copy': c, onclick: () => copyText(c, code) }, 'Copy'));
  };
  const pr = s.pr_url && /^https?:\/\//.test(s.pr_url)
    ? h('span', { 'data-pr': '' }, 'Pull request ', h('a', { href: s.pr_url, target: '_blank', rel: 'noopener noreferrer' }, s.pr_url))
    : null;
  return h('div.ship', pr, h('details', h('summary', 'Push / pull request', h('span.muted', ' — from your terminal')),
    h('p.flush.muted', 'These run your own git and gh, with your SSH agent and gh login; the daemon never pushes. The pull request\'s URL is recorded here.'),
    cmd(`agentpool session push ${s.id}`),
    cmd(`agentpool session pr ${s.id}`)));
}
