package main

import (
	"strings"
	"testing"
)

func TestCompareURL(t *testing.T) {
	tests := []struct {
		remote, base string
		want         string // a prefix; "" wants an error
	}{
		{"https://github.com/o/r.git", "main", "https://github.com/o/r/compare/main...agentpool/s1?"},
		{"git@github.com:o/r.git", "", "https://github.com/o/r/compare/agentpool/s1?"},
		{"ssh://git@ssh.github.com:443/o/r.git", "dev", "https://github.com/o/r/compare/dev...agentpool/s1?"},
		{"https://gitlab.com/group/sub/r.git", "main", "https://gitlab.com/group/sub/r/-/merge_requests/new?"},
		{"git@gitlab.example.org:g/r.git", "main", "https://gitlab.example.org/g/r/-/merge_requests/new?"},
		{"https://user@bitbucket.org/team/r.git", "main", "https://bitbucket.org/team/r/pull-requests/new?"},
		{"https://git.example.com/o/r.git", "main", ""},
		{"/srv/git/r.git", "main", ""},
		{"file:///srv/git/r.git", "main", ""},
	}
	for _, tt := range tests {
		got, err := compareURL(tt.remote, "agentpool/s1", tt.base, "Fix it", "body")
		if tt.want == "" {
			if err == nil {
				t.Errorf("compareURL(%q) = %q; want an error", tt.remote, got)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(got, tt.want) {
			t.Errorf("compareURL(%q) = %q, %v; want prefix %q", tt.remote, got, err, tt.want)
		}
	}
	got, _ := compareURL("https://gitlab.com/g/r", "agentpool/s1", "main", "T", "B")
	for _, w := range []string{"merge_request%5Bsource_branch%5D=agentpool%2Fs1", "merge_request%5Btarget_branch%5D=main", "merge_request%5Btitle%5D=T"} {
		if !strings.Contains(got, w) {
			t.Errorf("GitLab compare URL %q lacks %q", got, w)
		}
	}
}
