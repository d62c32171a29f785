package acp

// LinkState reports how many SDK connections b has made and whether one is
// open now.
func LinkState(b *Backend) (made int, open bool) {
	b.links.mu.Lock()
	defer b.links.mu.Unlock()
	return b.links.made, b.links.cur != nil
}
