// The session's Fork button: asks for the fork's agent and, optionally,
// the turn to fork at, then POST /v1/sessions/{id}/fork and opens the new
// session. A refusal (a turn that does not exist, an agent that is not
// ready) shows in a banner under the session's head; nothing was made.
import { h, put, confirmDialog, toast } from './dom.js';
import * as API from './api.js';
import { agentPicker } from './sessions.js';
import { refreshSessions } from './store.js';

/** forkFlow asks to confirm a fork of session s (lastTurn: its last
 * turn, 0 for none), forks it, and opens the fork; refusals go into box. */
export async function forkFlow(s, box, lastTurn) {
  const picker = agentPicker(s.active_agent, 'fork-agent');
  const turn = h('input', { type: 'number', name: 'fork-turn', min: 1, max: lastTurn || undefined, step: 1, inputmode: 'numeric',
    placeholder: 'now', disabled: !lastTurn, autocomplete: 'off' });
  const title = h('input', { type: 'text', name: 'fork-title', placeholder: `fork of ${s.title || s.id}`, autocomplete: 'off' });
  const body = [
    h('p.flush', 'A new session on its own branch, starting with this session\'s files as they are now, uncommitted changes included, and with its history, so its agent knows the story. This session is not touched.'),
    h('label.field', 'Agent', h('span.hint', 'the fork\'s agent'), picker),
    h('label.field', 'At turn', h('span.hint', lastTurn ? `optional: 1 to ${lastTurn}, its files and history as that turn left them` : 'no turn yet: the session as it is now'), turn),
    h('label.field', 'Title', h('span.hint', 'optional'), title),
  ];
  const ok = await confirmDialog(`Fork session ${s.title || s.id}?`, body, [{ label: 'Fork', class: 'primary', value: () => true }]);
  if (!ok) return;
  put(box, h('div.banner.info', { 'data-fork': 'running' }, 'Forking…'));
  try {
    const req = { agent: picker.value || undefined, title: title.value.trim() || undefined };
    const n = parseInt(turn.value, 10);
    if (n > 0) req.turn = n;
    const f = await API.forkSession(s.id, req);
    put(box);
    toast(`Forked into ${f.title || f.id}.`);
    refreshSessions().catch(() => {});
    location.hash = `#/s/${encodeURIComponent(f.id)}`;
  } catch (e) {
    put(box, h('div.banner.bad', { role: 'alert', 'data-fork': 'failed' },
      h('button.small.ghost.dismiss', { type: 'button', onclick: () => put(box) }, 'Dismiss'),
      h('strong', 'Not forked: nothing was made. '), h('span', e.message)));
  }
}
