package wiring

import (
	"slices"
	"testing"

	"github.com/agentpool/agentpool/worktree"
)

func TestIdentityEnv(t *testing.T) {
	jane := worktree.Identity{Name: "Jane Doe", Email: "jane@example.com"}
	for _, tc := range []struct {
		name string
		env  []string
		id   worktree.Identity
		want []string
	}{
		{"empty env", []string{"PATH=/bin"}, jane, []string{
			"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Jane Doe",
			"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=jane@example.com", "GIT_CONFIG_COUNT=2"}},
		{"after the env's own entries", []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=core.quotepath", "GIT_CONFIG_VALUE_0=false"}, jane, []string{
			"GIT_CONFIG_KEY_1=user.name", "GIT_CONFIG_VALUE_1=Jane Doe",
			"GIT_CONFIG_KEY_2=user.email", "GIT_CONFIG_VALUE_2=jane@example.com", "GIT_CONFIG_COUNT=3"}},
		{"the last count wins", []string{"GIT_CONFIG_COUNT=5", "GIT_CONFIG_COUNT=0"}, jane, []string{
			"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Jane Doe",
			"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=jane@example.com", "GIT_CONFIG_COUNT=2"}},
		{"a name the env sets is kept", []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=User.Name", "GIT_CONFIG_VALUE_0=Bot"}, jane, []string{
			"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=jane@example.com", "GIT_CONFIG_COUNT=2"}},
		{"both set", []string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_KEY_1=user.email"}, jane, nil},
		{"bogus count", []string{"GIT_CONFIG_COUNT=x"}, jane, nil},
		{"no identity", nil, worktree.Identity{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := identityEnv(tc.env, tc.id); !slices.Equal(got, tc.want) {
				t.Errorf("identityEnv(%q) = %q; want %q", tc.env, got, tc.want)
			}
		})
	}
}
