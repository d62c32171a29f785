package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/pool"
)

// mergingPool is the fake pool with a Merge.
type mergingPool struct {
	*fakePool
	merge func(ctx context.Context, id string, req pool.MergeRequest) (pool.MergeResult, error)
}

func (m mergingPool) Merge(ctx context.Context, id string, req pool.MergeRequest) (pool.MergeResult, error) {
	return m.merge(ctx, id, req)
}

func TestMergeEndpoint(t *testing.T) {
	var got []pool.MergeRequest
	fp := &fakePool{}
	mp := mergingPool{fakePool: fp, merge: func(_ context.Context, id string, req pool.MergeRequest) (pool.MergeResult, error) {
		got = append(got, req)
		switch id {
		case "conflicting":
			return pool.MergeResult{}, fmt.Errorf("merge session %q: merge would conflict in a.txt: %w", id, pool.ErrConflict)
		case "busy":
			return pool.MergeResult{}, fmt.Errorf("session %q is running turn 2: %w", id, pool.ErrBusy)
		case "missing":
			return pool.MergeResult{}, fmt.Errorf("session %q: %w", id, pool.ErrNotFound)
		}
		return pool.MergeResult{Session: id, Branch: "agentpool/" + id, Into: "main", Method: "fast-forward", Head: "abc"}, nil
	}}
	env := newTestEnv(t, fp, func(c *Config) { c.Pool = mp })
	ctx := context.Background()

	res, err := env.client.MergeSession(ctx, "s1", MergeRequest{Into: "release", Squash: true})
	if err != nil || res.Session != "s1" || res.Method != "fast-forward" || len(got) != 1 || got[0].Into != "release" || !got[0].Squash {
		t.Errorf("MergeSession() = %+v, %v (pool got %+v); want the request passed and the result back", res, err, got)
	}
	// An empty body merges into the base.
	req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/v1/sessions/s1/merge", nil)
	req.Header.Set("Authorization", "Bearer "+env.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || got[len(got)-1] != (pool.MergeRequest{}) {
		t.Errorf("POST merge without a body = %d (pool got %+v); want 200 with a zero request", resp.StatusCode, got[len(got)-1])
	}

	tests := []struct {
		id       string
		req      MergeRequest
		status   int
		code     string
		contains string
	}{
		{"conflicting", MergeRequest{}, http.StatusConflict, CodeConflict, "a.txt"},
		{"busy", MergeRequest{}, http.StatusConflict, CodeBusy, "turn 2"},
		{"missing", MergeRequest{}, http.StatusNotFound, CodeNotFound, "missing"},
		{"s1", MergeRequest{Squash: true, Rebase: true}, http.StatusBadRequest, CodeBadRequest, "do not go together"},
	}
	for _, tt := range tests {
		_, err := env.client.MergeSession(ctx, tt.id, tt.req)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code || !strings.Contains(ae.Message, tt.contains) {
			t.Errorf("MergeSession(%q, %+v) error = %v; want %d %s naming %q", tt.id, tt.req, err, tt.status, tt.code, tt.contains)
		}
	}

	// A pool that cannot merge answers 501.
	plain := newTestEnv(t, &fakePool{}, nil)
	_, err = plain.client.MergeSession(ctx, "s1", MergeRequest{})
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented || ae.Code != CodeNotImplemented {
		t.Errorf("MergeSession() on a pool without Merge error = %v; want 501", err)
	}
}
