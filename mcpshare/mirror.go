package mcpshare

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// remirror lists the server's features again after it said they changed.
func (s *server) remirror() {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	if up == nil {
		return
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		ctx, cancel := context.WithTimeout(s.m.ctx, 30*time.Second)
		defer cancel()
		if err := s.mirror(ctx, up); err != nil {
			s.log.Warn("listing the shared MCP server's features again", "err", err)
		}
	}()
}

// mirror lists the server's tools, prompts, resources and resource
// templates and puts them on the face, which tells every agent's
// session of a change.
func (s *server) mirror(ctx context.Context, up *upstream) error {
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	caps := up.cs.InitializeResult().Capabilities
	want := map[string]string{}
	var adds []func()
	add := func(key string, v any, do func()) {
		raw, _ := json.Marshal(v)
		want[key] = string(raw)
		if s.mirrored[key] != string(raw) {
			adds = append(adds, do)
		}
	}
	if caps != nil && caps.Tools != nil {
		for t, err := range up.cs.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			add("tool:"+t.Name, t, func() { s.addTool(t) })
		}
	}
	if caps != nil && caps.Prompts != nil {
		for p, err := range up.cs.Prompts(ctx, nil) {
			if err != nil {
				return err
			}
			add("prompt:"+p.Name, p, func() { s.face.AddPrompt(p, s.getPrompt) })
		}
	}
	if caps != nil && caps.Resources != nil {
		for r, err := range up.cs.Resources(ctx, nil) {
			if err != nil {
				return err
			}
			add("resource:"+r.URI, r, func() { s.face.AddResource(r, s.readResource) })
		}
		for t, err := range up.cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return err
			}
			add("template:"+t.URITemplate, t, func() { s.face.AddResourceTemplate(t, s.readResource) })
		}
	}
	var tools, prompts, resources, templates []string
	for key := range s.mirrored {
		if _, ok := want[key]; ok {
			continue
		}
		kind, name, _ := strings.Cut(key, ":")
		switch kind {
		case "tool":
			tools = append(tools, name)
		case "prompt":
			prompts = append(prompts, name)
		case "resource":
			resources = append(resources, name)
		case "template":
			templates = append(templates, name)
		}
	}
	if len(tools) > 0 {
		s.face.RemoveTools(tools...)
	}
	if len(prompts) > 0 {
		s.face.RemovePrompts(prompts...)
	}
	if len(resources) > 0 {
		s.face.RemoveResources(resources...)
	}
	if len(templates) > 0 {
		s.face.RemoveResourceTemplates(templates...)
	}
	for _, do := range adds {
		do()
	}
	s.mirrored = want
	return nil
}

// addTool puts t on the face; the SDK refuses (panics on) a tool whose
// input schema is not an object schema, which is skipped.
func (s *server) addTool(t *mcp.Tool) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Warn("a tool of the shared MCP server is not passed on", "tool", t.Name, "why", r)
		}
	}()
	s.face.AddTool(t, s.callTool)
}
