// The page's credential: redeemed from a one-time login link's code by the
// login page, kept in localStorage (its scope is this scheme, host and
// port, so the other ports of the host never see it, and a new tab of the
// page needs no new link), and sent as the bearer credential. Nothing the
// browser sends by itself (no cookie) authorizes anything.

const KEY = 'agentpool.credential';

/** credential returns the stored page credential, or ''. */
export function credential() {
  try { return localStorage.getItem(KEY) || ''; } catch { return ''; }
}

/** setCredential stores the page credential. */
export function setCredential(c) { localStorage.setItem(KEY, c); }

/** forgetCredential drops the stored page credential. */
export function forgetCredential() {
  try { localStorage.removeItem(KEY); } catch { /* storage disabled */ }
}

/** authHeaders are the headers that carry the credential, if one. */
export function authHeaders() {
  const c = credential();
  return c ? { Authorization: `Bearer ${c}` } : {};
}
