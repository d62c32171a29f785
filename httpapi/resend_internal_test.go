package httpapi

import (
	"errors"
	"net/url"
	"testing"
)

// TestResendPrompt: a prompt is sent again (with its key) when the client
// cannot know whether it arrived, among them a kept-alive connection the
// daemon closed as it went out; never after an answer.
func TestResendPrompt(t *testing.T) {
	closedIdle := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/sessions/s/prompt", Err: errors.New("http: server closed idle connection")}
	if !resendPrompt(closedIdle) {
		t.Error("a prompt whose kept connection the daemon closed is not sent again")
	}
	if resendPrompt(&Error{Status: 400, Code: CodeNotWriter, Message: "bad"}) {
		t.Error("a prompt the daemon refused is sent again")
	}
}
