// The page's entry: routes (#/, #/s/ID, #/providers, #/pool), the login
// help, the connection light and the notification switch.
import { h, put } from './dom.js';
import * as API from './api.js';
import { store, on, connect, disconnect, refreshAll, updateNeeds } from './store.js';
import { loadKey, forgetKey, onAuthState, secure, insecureMessage } from './auth.js';
import { sessionsView } from './sessions.js';
import { sessionView } from './session.js';

const main = document.getElementById('main');
const conn = document.getElementById('conn');
let cleanup = null;
let loggedOut = false;

// The page installs no service worker: one found here was registered by a
// program that held the daemon's address while it was down. Remove it.
if (navigator.serviceWorker) {
  navigator.serviceWorker.getRegistrations().then(rs => rs.forEach(r => r.unregister())).catch(() => {});
}

function route() {
  if (loggedOut) return;
  if (cleanup) { cleanup(); cleanup = null; }
  const hash = location.hash.replace(/^#/, '') || '/';
  let nav = 'sessions';
  const m = hash.match(/^\/s\/(.+)$/);
  if (m) {
    cleanup = sessionView(main, decodeURIComponent(m[1]));
  } else if (hash === '/providers') {
    nav = 'providers';
    import('./providers.js').then(p => { if (currentHash === location.hash) cleanup = p.providersView(main); });
  } else if (hash === '/attempts' || hash.startsWith('/a/')) {
    nav = 'attempts';
    const a = hash.match(/^\/a\/(.+)$/);
    import('./attempts.js').then(p => {
      if (currentHash === location.hash) cleanup = a ? p.attemptSetView(main, decodeURIComponent(a[1])) : p.attemptsView(main);
    });
  } else if (hash === '/pool') {
    nav = 'pool';
    import('./pool.js').then(p => { if (currentHash === location.hash) cleanup = p.poolView(main); });
  } else {
    cleanup = sessionsView(main);
  }
  currentHash = location.hash;
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === nav);
  main.scrollTop = 0;
}
let currentHash = '';

const logoutBtn = document.getElementById('logout');

/** showLogin replaces the page with the login help; the credential, if
 * any, is gone (refused by the daemon, or logged out). */
function showLogin(title = 'Log in to agentpool', note = '') {
  if (loggedOut) return;
  loggedOut = true;
  if (cleanup) { cleanup(); cleanup = null; }
  disconnect();
  banner.hidden = true;
  logoutBtn.hidden = true;
  store.live = false;
  conn.classList.remove('live');
  put(main, h('div.panel.login', h('h1', title),
    note ? h('p', note) : null,
    h('p', note ? 'To log in again, get a new link in a terminal:' : 'This page needs a login link from the daemon. In a terminal, run:'),
    h('pre', 'agentpool open'),
    h('p.muted', 'and open the link it prints (it works once, for a minute). Scripts and the CLI use the token file instead.')));
}

// While logging out, a request that the revocation answers 401 (the
// stream reconnecting, a refresh) must not put up the login help first:
// the page says 'Logged out'.
let loggingOut = false;
logoutBtn.onclick = async () => {
  logoutBtn.disabled = true;
  loggingOut = true;
  disconnect();
  try { await API.logout(); } catch { /* revoked already, or the daemon is down: forget it all the same */ }
  await forgetKey();
  showLogin('Logged out', 'This page\'s login was revoked; other pages stay logged in.');
};

API.setUnauthorizedHandler(() => { if (!loggingOut) showLogin(); });

// The banner says why nothing is sent while the daemon cannot prove
// itself (auth.js); the page retries by itself.
const banner = document.getElementById('auth-banner');
const bannerText = {
  unreachable: ['The daemon at this address did not prove it is yours.',
    'It may be stopped, or another program holds its port. Nothing was sent; retrying…'],
  proof: ['Something answered at this address but could not prove it is the agentpool daemon you logged in to.',
    'Another program may hold its port. Nothing was sent to it; retrying…'],
  insecure: ['This page cannot log in here.', insecureMessage],
};
onAuthState(state => {
  const t = bannerText[state];
  banner.hidden = !t || loggedOut;
  if (t) put(banner, h('strong', t[0]), ' ', h('span', t[1]));
  banner.dataset.state = t ? state : '';
  banner.classList.toggle('warn', state === 'unreachable');
  banner.classList.toggle('bad', state !== 'unreachable');
});

on(topic => {
  if (topic !== 'live') return;
  conn.classList.toggle('live', store.live);
  conn.classList.toggle('down', !store.live);
  conn.title = store.live ? 'Connected to the daemon' : 'Disconnected: reconnecting…';
});

const notifyBtn = document.getElementById('notify-enable');
if ('Notification' in window && Notification.permission === 'default') {
  notifyBtn.hidden = false;
  notifyBtn.onclick = () => Notification.requestPermission().then(() => { notifyBtn.hidden = Notification.permission !== 'default'; });
}

async function start() {
  if (!secure()) {
    put(main, h('div.panel.login', h('h1', 'This page cannot log in here'), h('p.error-text', insecureMessage)));
    return;
  }
  try {
    await refreshAll();
  } catch (e) {
    if (e.status === 401) return; // showLogin has run
    put(main, h('div.pad.muted', e.kind ? 'Waiting for the daemon to prove itself…' : `The daemon did not answer: ${e.message}`));
    setTimeout(start, 2000);
    return;
  }
  updateNeeds();
  logoutBtn.hidden = !await loadKey();
  window.addEventListener('hashchange', route);
  route();
  connect();
}
start();
