package sandbox

import "testing"

// A read-only bind at its own path beneath a read-only bind of a
// directory at its own path shows nothing new and is skipped; beneath
// anything else (a writable grant, a tmpfs, the home, a bind from
// elsewhere) it is needed.
func TestRedundantMount(t *testing.T) {
	ro := func(p string) viewMount { return viewMount{src: p, dst: p, attr: attrRO, kind: mountBind, dir: true} }
	rw := func(p string) viewMount { return viewMount{src: p, dst: p, attr: attrRW, kind: mountBind, dir: true} }
	file := func(p string) viewMount { return viewMount{src: p, dst: p, attr: attrRO, kind: mountBind} }
	done := []viewMount{
		ro("/usr"), ro("/etc"), rw("/work/tree"), {dst: "/tmp", kind: mountTmpfs}, {dst: "/root", kind: mountHome},
		{src: "/elsewhere", dst: "/opt", attr: attrRO, kind: mountBind, dir: true}, file("/etc/hosts"),
	}
	tests := []struct {
		m    viewMount
		want bool
	}{
		{ro("/usr/local/bin"), true},
		{file("/etc/ssl/certs/ca-certificates.crt"), true},
		{ro("/usr"), false},             // the same path is not beneath
		{rw("/usr/local/share"), false}, // writable: a bind of its own
		{ro("/work/tree/vendor"), false},
		{ro("/tmp/grant"), false},
		{ro("/root/.cargo/bin"), false},
		{ro("/opt/tool"), false}, // beneath a bind from another path
		{viewMount{src: "/usr/lib/real", dst: "/usr/lib/link", attr: attrRO, kind: mountBind}, false},
		{ro("/var/lib"), false},     // beneath nothing
		{ro("/etc/hosts/x"), false}, // beneath a file's bind
	}
	for _, tt := range tests {
		if got := redundant(done, tt.m); got != tt.want {
			t.Errorf("redundant(%+v) = %v; want %v", tt.m, got, tt.want)
		}
	}
	// The nearest mount above decides: a writable grant beneath a
	// read-only one makes a read-only grant beneath it needed.
	done = append(done, rw("/usr/local"))
	if redundant(done, ro("/usr/local/bin")) {
		t.Error("a read-only grant beneath a writable one beneath a read-only one was skipped")
	}
}
