//go:build !cgo

package sandbox

// unshared is false in a binary without cgo: it has no constructor to
// make the namespaces (see unshare.go).
func unshared() bool { return false }
