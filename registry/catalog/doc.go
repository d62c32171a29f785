// Package catalog is the catalog of ACP agents a user can add as
// providers: documents in the ACP registry's format (registry.json: id,
// name, version, description and the agent's npx, uvx or binary
// distributions), parsed strictly, with a snapshot of the public registry
// built into the binary, merged with what agentpool knows that the
// registry does not say (which built-in provider an entry is, recommended
// environment, notes).
//
// Parse checks a document: unknown fields and unknown distribution kinds
// or platforms are tolerated, so that a newer registry still loads, but
// every required field is checked and every id must be a valid provider
// id; a bad document is refused whole with the JSON path of each problem.
// Entries turns a document into Entries for one platform: the command a
// provider runs for each agent and the step that installs it.
package catalog
