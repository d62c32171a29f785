// The API client: the same HTTP API every other client uses, authenticated
// by the page's run bearer (auth.js) in the Authorization header; the
// browser sends no cookie and no other credential of its own.
import { runBearer, dropBearer, AuthError } from './auth.js';

/** ApiError is a failed request: status, code and message of the API's
 * error body, and the diagnostics of an invalid config. Status 0: the
 * request was not sent, or got no answer (kind says why: see AuthError). */
export class ApiError extends Error {
  constructor(status, body, kind = '') {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.kind = kind;
    this.code = e.code || '';
    this.field = e.field || '';
    this.diagnostics = e.diagnostics || [];
  }
}

let onUnauthorized = () => {};

/** setUnauthorizedHandler sets what happens on a 401 (show the login help). */
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

/** unauthorized shows the login help: the daemon does not know this page. */
export function unauthorized() {
  dropBearer();
  onUnauthorized();
}

/** bearerHeaders returns the Authorization header of the run bearer
 * (authenticating first if need be) and the bearer; it throws an ApiError
 * of status 0 when the daemon cannot prove itself (nothing is sent), or
 * of 401, after the login help, when it does not know this page. */
export async function bearerHeaders() {
  let b;
  try {
    b = await runBearer();
  } catch (e) {
    if (!(e instanceof AuthError)) throw e;
    if (e.kind === 'logged-out') unauthorized();
    throw new ApiError(e.status, { error: { message: e.message } }, e.kind);
  }
  return { headers: b ? { Authorization: `Bearer ${b}` } : {}, bearer: b };
}

/** api sends a request and returns the decoded JSON answer (null for 204).
 * A 401 makes it authenticate again and retry once; a request that fails
 * on the network drops the run bearer, so that nothing is sent again
 * before the daemon proves itself. */
export async function api(method, path, body, opts = {}) {
  for (let attempt = 0; ; attempt++) {
    const { headers: auth, bearer } = await bearerHeaders();
    const headers = { Accept: 'application/json', ...auth, ...(opts.headers || {}) };
    let payload;
    if (body !== undefined) {
      headers['Content-Type'] = opts.contentType || 'application/json';
      payload = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, { method, headers, body: payload, credentials: 'omit', cache: 'no-store' });
    } catch (e) {
      dropBearer(bearer);
      throw new ApiError(0, { error: { message: `the daemon did not answer (${e.message || e})` } }, 'unreachable');
    }
    if (resp.status === 401 && bearer && attempt === 0) {
      dropBearer(bearer);
      continue;
    }
    if (resp.status === 204) return null;
    let data = null;
    const text = await resp.text();
    if (text) {
      try { data = JSON.parse(text); } catch { data = text; }
    }
    if (!resp.ok) {
      if (resp.status === 401) unauthorized();
      throw new ApiError(resp.status, data);
    }
    return data;
  }
}

const enc = encodeURIComponent;

export const listSessions = () => api('GET', '/v1/sessions');
export const getSession = id => api('GET', `/v1/sessions/${enc(id)}`);
export const createSession = req => api('POST', '/v1/sessions', req);
export const closeSession = (id, discard) => api('DELETE', `/v1/sessions/${enc(id)}?discard=${discard ? 'true' : 'false'}`);
export const prompt = (id, text, agent) => api('POST', `/v1/sessions/${enc(id)}/prompt`, { text, agent: agent || undefined });
export const cancel = id => api('POST', `/v1/sessions/${enc(id)}/cancel`);
export const retry = id => api('POST', `/v1/sessions/${enc(id)}/retry`);
export const turns = id => api('GET', `/v1/sessions/${enc(id)}/turns`);
export const permissions = id => api('GET', `/v1/sessions/${enc(id)}/permissions`);
export const answer = (id, req, choice) => api('POST', `/v1/sessions/${enc(id)}/permissions/${enc(req)}`, { choice });
export const remembered = id => api('GET', `/v1/sessions/${enc(id)}/permissions/remembered`);
export const forgetRemembered = id => api('DELETE', `/v1/sessions/${enc(id)}/permissions/remembered`);
export const diff = (id, turn) => api('GET', `/v1/sessions/${enc(id)}/diff?turn=${turn || 0}`);
export const restore = (id, turn, after) => api('POST', `/v1/sessions/${enc(id)}/restore`, { turn, after: !!after });
export const providers = () => api('GET', '/v1/providers');
export const patchProvider = (id, patch) => api('PATCH', `/v1/providers/${enc(id)}`, patch, { contentType: 'application/merge-patch+json' });
export const reloadProviders = () => api('POST', '/v1/providers/refresh');
export const probeProvider = id => api('POST', `/v1/providers/${enc(id)}/probe`);
export const loginAgent = (id, method) => api('POST', `/v1/providers/${enc(id)}/login`, { method });
export const poolStatus = () => api('GET', '/v1/pool');
export const evict = (session, agent) => api('DELETE', `/v1/pool/${enc(session)}/${enc(agent)}`);
export const health = () => api('GET', '/v1/health');
export const attachTicket = id => api('POST', `/v1/sessions/${enc(id)}/attach-ticket`);
export const logout = () => api('POST', '/v1/logout');
export const mergeSession = (id, req) => api('POST', `/v1/sessions/${enc(id)}/merge`, req);
export const forkSession = (id, req) => api('POST', `/v1/sessions/${enc(id)}/fork`, req);
export const removeProvider = id => api('DELETE', `/v1/providers/${enc(id)}`);
export const agentConfig = (id, agent) => api('GET', `/v1/sessions/${enc(id)}/agents/${enc(agent)}/config`);
export const setBudget = (id, budget) => api('PUT', `/v1/sessions/${enc(id)}/budget`, budget);
export const setAgentConfig = (id, agent, change) => api('PUT', `/v1/sessions/${enc(id)}/agents/${enc(agent)}/config`, change);
export const review = (id, req) => api('POST', `/v1/sessions/${enc(id)}/review`, req);
export const setPR = (id, url) => api('PUT', `/v1/sessions/${enc(id)}/pr`, { url });
