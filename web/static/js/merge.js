// The session's Merge button: asks how (merge, squash, or bring the
// session's branch up to date with its base) and into which branch, then
// POST /v1/sessions/{id}/merge; what the merge did, or why nothing was
// changed (a conflict, a base checked out with uncommitted changes), shows
// in a banner under the session's head until the next merge.
import { h, put, confirmDialog } from './dom.js';
import * as API from './api.js';

const short = c => (c || '').slice(0, 10);

/** mergeFlow asks to confirm, merges session s and puts the outcome into
 * box; done() runs after a merge that changed something. */
export async function mergeFlow(s, box, done) {
  const branch = (s.worktree && s.worktree.branch) || 'the session\'s branch';
  const radio = (value, checked) => h('input', { type: 'radio', name: 'merge-mode', value, checked });
  const modes = { merge: radio('merge', true), squash: radio('squash', false), rebase: radio('rebase', false) };
  const into = h('input', { type: 'text', name: 'into', placeholder: s.base_ref || 'the session\'s base', autocomplete: 'off' });
  const body = [
    h('p.flush', `Uncommitted work is committed to ${branch} first. Nothing changes when the merge would conflict or when the target is checked out with uncommitted changes.`),
    h('label.choice', modes.merge, h('span', h('strong', 'Merge'), h('small', `Brings the commits of ${branch} into the target (a fast-forward when it can).`))),
    h('label.choice', modes.squash, h('span', h('strong', 'Squash'), h('small', 'One commit summarising the session (its prompts) on the target.'))),
    h('label.choice', modes.rebase, h('span', h('strong', 'Update from the target'), h('small', `Merges the target into ${branch} and the session's worktree instead.`))),
    h('label.field', 'Target branch', h('span.hint', 'a local branch; empty for the session\'s base'), into),
  ];
  const mode = await confirmDialog(`Merge session ${s.title || s.id}?`, body,
    [{ label: 'Merge', class: 'primary', value: () => Object.keys(modes).find(k => modes[k].checked) }]);
  if (!mode) return;
  put(box, h('div.banner.info', { 'data-merge': 'running' }, 'Merging…'));
  try {
    const r = await API.mergeSession(s.id, { into: into.value.trim() || undefined, squash: mode === 'squash', rebase: mode === 'rebase' });
    put(box, result(r));
    if (r.method !== 'up-to-date') done();
  } catch (e) {
    const conflict = e.code === 'conflict';
    put(box, h('div.banner.bad', { role: 'alert', 'data-merge': conflict ? 'conflict' : 'failed' }, dismiss(),
      h('strong', conflict ? 'Not merged: nothing was changed. ' : 'Merge failed. '), h('span', e.message),
));
  }
}

/** result is the banner of merge result r. */
function result(r) {
  const [from, to] = r.rebase ? [r.into, r.branch] : [r.branch, r.into];
  const lines = [];
  if (r.committed) lines.push(h('div', `Uncommitted work committed to ${r.branch} first (${short(r.work_commit)}).`));
  if (r.method === 'up-to-date') {
    lines.unshift(h('strong', `Nothing to merge: ${to} already has everything of ${from}.`));
  } else {
    lines.unshift(h('strong', `Merged ${from} into ${to} (${r.method}): ${short(r.before)} → ${short(r.head)}.`));
    lines.push(h('div', r.working_tree ? ['Files updated in ', h('code', r.working_tree), '.'] : `${to} is not checked out: only the branch moved.`));
    const n = (r.commits || []).length + (r.more_commits || 0);
    if (n) lines.push(h('ul.flush', (r.commits || []).map(c => h('li', h('code', short(c.id)), ' ', c.subject)),
      r.more_commits ? h('li.muted', `… and ${r.more_commits} more`) : null));
  }
  return h('div.banner.ok', { role: 'status', 'data-merge': r.method }, dismiss(), lines);
}

/** dismiss is a button that removes the banner it is in. */
function dismiss() {
  return h('button.small.ghost.dismiss', { type: 'button', onclick: e => e.target.closest('.banner').remove() }, 'Dismiss');
}
