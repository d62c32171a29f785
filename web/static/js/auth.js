// The page's login. The login page redeems a one-time code for a page
// credential and keeps only its SHA-256, imported as a non-extractable
// WebCrypto HMAC key, in IndexedDB (scoped to this scheme, host and port,
// so a new tab needs no new link), with the credential's public id. The
// daemon keeps the same SHA-256. Nothing the browser sends by itself (no
// cookie) authorizes anything, and nothing kept in storage is a token.
//
// At each start, and whenever the daemon may have gone (a request that
// failed on the network, a stream that ended, a 401), the page asks for a
// challenge with a fresh nonce; the daemon answers with a MAC of it, which
// proves it knows the key: whatever else holds the daemon's port while it
// is stopped cannot. Only then does the page answer the challenge, for a
// run bearer that it keeps in memory only and that dies with the daemon's
// run. So an impostor on the port collects nothing that works against the
// daemon once it is back.

const DB = 'agentpool';
const STORE = 'keys';
const SLOT = 'page';

// Earlier versions kept the credential itself in localStorage, where an
// impostor's script on this origin could read it: it is dropped, and the
// page logs in again once.
try { localStorage.removeItem('agentpool.credential'); } catch { /* storage disabled */ }

/** AuthError is a failed authentication. kind: 'insecure' (no WebCrypto
 * here), 'unreachable' (nothing answered), 'proof' (something answered
 * but did not prove it is the daemon), 'logged-out' (the daemon does not
 * know this page). */
export class AuthError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
    this.status = kind === 'logged-out' ? 401 : 0;
  }
}

/** secure says whether the browser offers what the login needs: WebCrypto
 * and IndexedDB exist in secure contexts only (https, or http at
 * 127.0.0.1 or localhost). */
export function secure() {
  return !!(window.isSecureContext && window.crypto && crypto.subtle && window.indexedDB);
}

/** insecureMessage says where the page must be opened. */
export const insecureMessage = 'This page must be opened over https, or at http://127.0.0.1 or http://localhost: ' +
  'only there does the browser offer the cryptography its login needs.';

// openDB opens the page's database, creating its store if it is missing
// (also when something else opened the database first, without it).
function openDB(version) {
  return new Promise((resolve, reject) => {
    const req = version ? indexedDB.open(DB, version) : indexedDB.open(DB);
    req.onupgradeneeded = () => {
      if (!req.result.objectStoreNames.contains(STORE)) req.result.createObjectStore(STORE);
    };
    req.onsuccess = () => {
      const db = req.result;
      if (db.objectStoreNames.contains(STORE)) { resolve(db); return; }
      const next = db.version + 1;
      db.close();
      openDB(next).then(resolve, reject);
    };
    req.onerror = () => reject(req.error);
    req.onblocked = () => reject(new Error('the page\'s database is held by another tab'));
  });
}

async function tx(mode, f) {
  const db = await openDB();
  try {
    return await new Promise((resolve, reject) => {
      const t = db.transaction(STORE, mode);
      const req = f(t.objectStore(STORE));
      t.oncomplete = () => resolve(req.result);
      t.onerror = t.onabort = () => reject(t.error);
    });
  } finally {
    db.close();
  }
}

/** loadKey returns the stored { id, key } of this page's login, or null. */
export async function loadKey() {
  if (!secure()) return null;
  try {
    const rec = await tx('readonly', s => s.get(SLOT));
    return rec && rec.id && rec.key ? rec : null;
  } catch { return null; }
}

/** storeCredential keeps the login of POST /v1/login: the SHA-256 of the
 * credential as a non-extractable HMAC key, and its id. The credential
 * itself is forgotten. */
export async function storeCredential(id, credential) {
  const h = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(credential));
  const key = await crypto.subtle.importKey('raw', h, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
  await tx('readwrite', s => s.put({ id, key }, SLOT));
  bearer = '';
}

/** forgetKey deletes this page's login (logout). */
export async function forgetKey() {
  bearer = '';
  try { await tx('readwrite', s => s.delete(SLOT)); } catch { /* storage disabled */ }
}

let bearer = '';      // the run bearer, in memory only
let pending = null;   // the authentication under way
let lastFailure = null;
let retryAt = 0;      // no new attempt before (ms since the epoch)
let backoff = 0;
let listener = () => {};

/** onAuthState sets what hears of each outcome: f('ok') or f(kind) of an
 * AuthError (to show or hide the banner). */
export function onAuthState(f) { listener = f; }

/** dropBearer forgets the run bearer b (the current one, if b is
 * omitted) after a 401 or a failure that may mean the daemon went away:
 * the next request authenticates again first. */
export function dropBearer(b) {
  if (b === undefined || b === bearer) bearer = '';
}

/** runBearer returns the run bearer to send, authenticating first when
 * there is none; '' if this page has no login (its requests then go
 * without one). It throws an AuthError when the daemon cannot prove
 * itself or refuses the page. */
export async function runBearer() {
  if (bearer) return bearer;
  if (!pending) {
    pending = authenticate().finally(() => { pending = null; });
  }
  return pending;
}

const hex = b => [...new Uint8Array(b)].map(x => x.toString(16).padStart(2, '0')).join('');

function unhex(s) {
  if (typeof s !== 'string' || !/^([0-9a-f]{2})+$/.test(s)) return null;
  return new Uint8Array(s.match(/../g).map(x => parseInt(x, 16)));
}

async function post(path, body) {
  try {
    return await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(body), credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new AuthError('unreachable', 'The daemon at this address did not answer: it may be stopped, or restarting.');
  }
}

const notProven = () => new AuthError('proof',
  'Something answered at this address but could not prove it is the agentpool daemon you logged in to: another program may hold its port.');

async function authenticate() {
  if (Date.now() < retryAt && lastFailure) throw lastFailure;
  try {
    if (!secure()) throw new AuthError('insecure', insecureMessage);
    const rec = await loadKey();
    if (!rec) return '';
    const enc = new TextEncoder();
    const nonce = hex(crypto.getRandomValues(new Uint8Array(32)));
    let resp = await post('/v1/page-auth/challenge', { id: rec.id, nonce });
    if (resp.status === 401) throw new AuthError('logged-out', 'This page is not logged in.');
    let ch = null;
    try { if (resp.status === 200) ch = await resp.json(); } catch { /* not JSON */ }
    const proof = ch && unhex(ch.proof);
    if (!proof || typeof ch.challenge !== 'string' ||
        !await crypto.subtle.verify('HMAC', rec.key, proof, enc.encode(`agentpool page hello v1\0${nonce}\0${rec.id}`))) {
      throw notProven();
    }
    // The daemon proved itself: answer its challenge.
    const mac = hex(await crypto.subtle.sign('HMAC', rec.key, enc.encode(`agentpool page auth v1\0${ch.challenge}\0${rec.id}`)));
    resp = await post('/v1/page-auth', { id: rec.id, challenge: ch.challenge, mac });
    if (resp.status === 401) throw new AuthError('logged-out', 'This page is not logged in.');
    let auth = null;
    try { if (resp.status === 200) auth = await resp.json(); } catch { /* not JSON */ }
    if (!auth || typeof auth.bearer !== 'string' || !auth.bearer) throw notProven();
    bearer = auth.bearer;
    backoff = 0;
    lastFailure = null;
    retryAt = 0;
    listener('ok');
    return bearer;
  } catch (e) {
    const err = e instanceof AuthError ? e : new AuthError('proof', String(e && e.message || e));
    if (err.kind !== 'logged-out') {
      backoff = Math.min(5000, backoff ? backoff * 2 : 1000);
      retryAt = Date.now() + backoff;
      lastFailure = err;
    }
    listener(err.kind);
    throw err;
  }
}
