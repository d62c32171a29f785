// The login page (/login#code=CODE): it takes the one-time code out of
// the address bar at once, redeems it (POST /v1/login) for the page's
// credential, keeps only a non-extractable key made of it (auth.js), and
// goes to the page. The code never reaches a server log or a Referer: it
// travels in the fragment and in a POST body.
import { h, put } from './dom.js';
import { storeCredential, loadKey, secure, insecureMessage } from './auth.js';

const box = document.getElementById('login');

function help(title, text) {
  put(box, h('h1', title), h('p', text), h('pre', 'agentpool open'),
    h('p.muted', 'It prints a new link; open it in this browser. ' +
      'Scripts and the CLI use the token file instead.'));
}

async function redeem() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const code = params.get('code') || '';
  history.replaceState(null, '', '/login');
  if (!secure()) {
    put(box, h('h1', 'This page cannot log in here'), h('p.error-text', insecureMessage));
    return;
  }
  if (!code) {
    if (await loadKey()) { location.replace('/'); return; }
    help('Log in to agentpool', 'This page needs a login link from the daemon; each link works once, for a minute. In a terminal, run:');
    return;
  }
  let resp;
  try {
    resp = await fetch('/v1/login', { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ code }), cache: 'no-store', credentials: 'omit' });
  } catch (e) {
    put(box, h('h1', 'The daemon did not answer'), h('p.error-text', String(e.message || e)), h('p', 'Is it running? Start it, then get a new link with:'), h('pre', 'agentpool open'));
    return;
  }
  if (resp.status === 201) {
    const login = await resp.json();
    try {
      await storeCredential(login.id, login.credential);
    } catch (e) {
      put(box, h('h1', 'The login could not be kept'), h('p.error-text', String(e.message || e)),
        h('p', 'The browser refused to store the page\'s key (is its storage disabled?). Try a new link:'), h('pre', 'agentpool open'));
      return;
    }
    location.replace('/');
    return;
  }
  if (resp.status === 401) {
    help('This login link was already used or has expired', 'Each link works once, for one minute. Get a new one in a terminal:');
    return;
  }
  let msg = `HTTP ${resp.status}`;
  try { msg = (await resp.json()).error.message || msg; } catch { /* not JSON */ }
  put(box, h('h1', 'The login failed'), h('p.error-text', msg), h('p', 'Try a new link:'), h('pre', 'agentpool open'));
}

redeem();
