// The catalog of coding agents that speak ACP (the Agent Client
// Protocol), for Providers → Add provider and the install hints of the
// provider cards. The daemon serves it (GET /v1/catalog): the ACP
// registry's agents, from the snapshot built into agentpool or the
// document the user gave with `agentpool providers catalog --from`, each
// with the command a provider for it runs, its install step and the
// environment agentpool recommends. Credentials never go here: each agent
// keeps its own login.
import { api } from './api.js';

/** CATALOG lists the catalog's agents, filled in place by loadCatalog:
 * { id (the provider id: the built-in's, or the one proposed for a new
 * entry of providers.json), registryId, name, version, description,
 * command, install, env, note, builtIn, distribution, unavailable }. */
export const CATALOG = [];

/** catalogSource says where the catalog comes from: { source ('builtin'
 * or 'file'), file, platform }. */
export const catalogSource = { source: '', file: '', platform: '' };

let loading = null;

/** loadCatalog reads the catalog from the daemon into CATALOG and returns
 * CATALOG; it reads it once unless force is set. */
export function loadCatalog({ force = false } = {}) {
  if (!loading || force) {
    loading = api('GET', '/v1/catalog').then(v => {
      const agents = (v && v.agents) || [];
      CATALOG.splice(0, CATALOG.length, ...agents.map(e => ({
        id: e.provider, registryId: e.id, name: e.name, version: e.version, description: e.description || '',
        command: e.command || [], install: e.install || '', env: e.env || null, note: e.note || '',
        builtIn: !!e.built_in, distribution: e.distribution || '', unavailable: e.unavailable || '',
      })));
      Object.assign(catalogSource, { source: v.source || '', file: v.file || '', platform: v.platform || '' });
      return CATALOG;
    }).catch(err => { loading = null; throw err; });
  }
  return loading;
}

// Modules that import this one read CATALOG at once (the provider cards'
// install hints): it is loaded before they run. A daemon that cannot
// answer leaves it empty; the Add provider dialog says why.
await loadCatalog().catch(() => {});
