package main

import "testing"

func TestLoopbackAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:7420", "127.0.0.1:7420"},
		{"0.0.0.0:7420", "127.0.0.1:7420"},
		{"[::]:7420", "127.0.0.1:7420"},
		{":7420", "127.0.0.1:7420"},
		{"[::1]:7420", "[::1]:7420"},
		{"localhost:1", "localhost:1"},
	}
	for _, tt := range tests {
		if got := loopbackAddr(tt.in); got != tt.want {
			t.Errorf("loopbackAddr(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
