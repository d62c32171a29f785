// Package mockmodel serves mocks of the model APIs that real agents call
// (the Anthropic Messages API, the OpenAI Responses and Chat Completions
// APIs, the Gemini API), for the tests that run real agents against them:
// each mock answers every request for a completion with Reply, streamed
// in pieces when asked, and records the requests it served.
package mockmodel

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reply is the text every mock model answers.
const Reply = "Hello from the mock model."

// AnthropicKey has the shape of an Anthropic API key.
const AnthropicKey = "sk-ant-api03-agentpool-mock-key-0000000000000000000000000000000000000000000000000000000000-AAAAAAAA"

// API is a model API a mock serves.
type API string

// The APIs.
const (
	// Anthropic is the Messages API (/v1/messages, with or without
	// streaming, and count_tokens).
	Anthropic API = "anthropic"
	// Responses is the OpenAI Responses API (/v1/responses, streamed) with
	// an empty model list.
	Responses API = "responses"
	// Gemini is the Gemini API's generateContent, streamGenerateContent
	// (alt=sse) and countTokens.
	Gemini API = "gemini"
	// ChatCompletions is the OpenAI Chat Completions API
	// (/v1/chat/completions, streamed or not) with an empty model list.
	ChatCompletions API = "chat"
)

// Config says where and how a mock serves.
type Config struct {
	// Addr is the address to listen on; "" means 127.0.0.1:0.
	Addr string
	// TLS, if set, makes the mock serve HTTPS with it.
	TLS *tls.Config
}

// Request is what a mock recorded of a request it served.
type Request struct {
	Method, Host, Path string
}

// Server is a running mock, closed when its test ends.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
}

// Requests returns the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Port returns the port the mock listens on.
func (s *Server) Port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

// New starts a mock of api as cfg says.
func New(t testing.TB, api API, cfg Config) *Server {
	t.Helper()
	var h func(w http.ResponseWriter, r *http.Request, body []byte)
	switch api {
	case Anthropic:
		h = anthropic
	case Responses:
		h = responses
	case Gemini:
		h = gemini
	case ChatCompletions:
		h = chatCompletions
	default:
		t.Fatalf("mockmodel: unknown API %q", api)
	}
	s := &Server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Host: r.Host, Path: r.URL.Path})
		s.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		h(w, r, body)
	}))
	if cfg.Addr != "" {
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			t.Fatalf("mockmodel: %v", err)
		}
		_ = s.Listener.Close()
		s.Listener = ln
	}
	if cfg.TLS != nil {
		s.TLS = cfg.TLS
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
}

func newSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	return sse{w}
}

func (s sse) send(event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// pieces splits the reply as a model streams it.
func pieces(text string) []string { return strings.SplitAfter(text, " ") }

func anthropic(w http.ResponseWriter, r *http.Request, body []byte) {
	switch {
	case strings.Contains(r.URL.Path, "count_tokens"):
		_, _ = w.Write([]byte(`{"input_tokens":12}`))
		return
	case !strings.HasPrefix(r.URL.Path, "/v1/messages"):
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream bool   `json:"stream"`
		Model  string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	usage := map[string]int{"input_tokens": 12, "output_tokens": 7}
	msg := map[string]any{"id": "msg_mock", "type": "message", "role": "assistant", "model": req.Model,
		"stop_reason": "end_turn", "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		msg["content"] = []any{map[string]any{"type": "text", "text": Reply}}
		_ = json.NewEncoder(w).Encode(msg)
		return
	}
	s := newSSE(w)
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	s.send("message_start", map[string]any{"type": "message_start", "message": start})
	s.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	for _, p := range pieces(Reply) {
		time.Sleep(20 * time.Millisecond)
		s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": p}})
	}
	s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 7}})
	s.send("message_stop", map[string]any{"type": "message_stop"})
}

func responses(w http.ResponseWriter, r *http.Request, body []byte) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/models"):
		_, _ = w.Write([]byte(`{"object":"list","data":[],"models":[]}`))
		return
	case !strings.HasSuffix(r.URL.Path, "/responses"):
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	s := newSSE(w)
	resp := map[string]any{"id": "resp_mock", "object": "response", "model": req.Model, "status": "in_progress", "output": []any{}}
	s.send("response.created", map[string]any{"type": "response.created", "response": resp})
	item := map[string]any{"type": "message", "id": "msg_mock", "role": "assistant", "status": "in_progress", "content": []any{}}
	s.send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	for _, p := range pieces(Reply) {
		time.Sleep(20 * time.Millisecond)
		s.send("response.output_text.delta", map[string]any{"type": "response.output_text.delta",
			"item_id": "msg_mock", "output_index": 0, "content_index": 0, "delta": p})
	}
	done := map[string]any{"type": "message", "id": "msg_mock", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": Reply, "annotations": []any{}}}}
	s.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done})
	resp["status"], resp["output"] = "completed", []any{done}
	resp["usage"] = map[string]any{"input_tokens": 12, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": 7, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": 19}
	s.send("response.completed", map[string]any{"type": "response.completed", "response": resp})
}

// gemini answers a request for JSON (the CLI's own classifiers) with a
// JSON object that names the user as the next speaker and the flash model
// as the route.
func gemini(w http.ResponseWriter, r *http.Request, body []byte) {
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, ":countTokens"):
		_, _ = w.Write([]byte(`{"totalTokens":12}`))
		return
	case !strings.Contains(path, ":generateContent") && !strings.Contains(path, ":streamGenerateContent"):
		http.NotFound(w, r)
		return
	}
	var req struct {
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &req)
	reply := Reply
	if req.GenerationConfig.ResponseMimeType == "application/json" {
		reply = `{"reasoning":"mock","next_speaker":"user","model_choice":"flash","complexity_score":1}`
	}
	chunk := func(text string, last bool) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "index": 0}
		out := map[string]any{"candidates": []any{c}, "modelVersion": "gemini-mock", "responseId": "resp_mock"}
		if last {
			c["finishReason"] = "STOP"
			out["usageMetadata"] = map[string]int{"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}
		}
		return out
	}
	if !strings.Contains(path, ":streamGenerateContent") {
		_ = json.NewEncoder(w).Encode(chunk(reply, true))
		return
	}
	s := newSSE(w)
	ps := pieces(reply)
	if reply != Reply {
		ps = []string{reply}
	}
	for i, p := range ps {
		time.Sleep(20 * time.Millisecond)
		s.send("", chunk(p, i == len(ps)-1))
	}
}

func chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/models"):
		_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
		return
	case !strings.HasSuffix(r.URL.Path, "/chat/completions"):
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	usage := map[string]int{"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
	if !req.Stream {
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": Reply}}}, "usage": usage})
		return
	}
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	s.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range pieces(Reply) {
		time.Sleep(20 * time.Millisecond)
		s.send("", chunk(map[string]any{"content": p}, nil))
	}
	last := chunk(map[string]any{}, "stop")
	last["usage"] = usage
	s.send("", last)
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}
