// Package permission decides what an agent may do.
//
// A Policy maps each Action (an ACP tool kind such as edit or execute, or an
// operation of the fs and terminal bridge) to allow, ask or deny. The Broker
// applies it to an agent's session/request_permission calls: it answers at
// once when the policy allows or denies, and otherwise holds the request until
// a person answers, the timeout passes, the session is cancelled or the
// caller's context ends, whichever comes first. Every request is resolved
// exactly once and reported as an audit Record.
//
// A request whose tool kind is missing or unknown (once the backend has
// applied what the agent announced of that tool call) is ActionUnknown, which
// a policy cannot name: it gets the strictest decision the policy gives any
// tool kind, so that an agent cannot reach a weaker rule, such as "other",
// by leaving the kind out.
//
// Options are always chosen by their kind (allow_once, allow_always,
// reject_once, reject_always), never by their id: ids differ between agents.
package permission
