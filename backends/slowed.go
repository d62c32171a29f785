package backends

// EventAgentSlowed says that the session's agent sends events faster than
// the store takes them and is being slowed: its output waits to be read
// while its own events wait for room in the store's write queue, and none
// of them is dropped. It is sent once per episode; its Data is the
// pool's SlowedData.
const EventAgentSlowed EventType = "agent.slowed"
