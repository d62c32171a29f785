package pool

import "sync"

// kept is a value of a session read from the store once and kept with
// it, for what only the host that holds the session changes (its budget,
// its prompts' keys). Its fields are guarded by the session's lock: get
// takes it, forget and a change of the kept value are made with it held.
type kept[T any] struct {
	val *T
	// gen counts the changes: a value read while one was made is not kept.
	gen int64
}

// get returns the kept value, else the one load reads, keeping it unless
// it changed meanwhile.
func (k *kept[T]) get(mu *sync.Mutex, load func() (T, error)) (T, error) {
	mu.Lock()
	if k.val != nil {
		v := *k.val
		mu.Unlock()
		return v, nil
	}
	gen := k.gen
	mu.Unlock()
	v, err := load()
	if err != nil {
		return v, err
	}
	mu.Lock()
	if k.gen == gen {
		k.val = &v
	}
	mu.Unlock()
	return v, nil
}

// forget drops the kept value, and any read in flight: the next get reads
// again. The session's lock is held.
func (k *kept[T]) forget() {
	k.val = nil
	k.gen++
}
