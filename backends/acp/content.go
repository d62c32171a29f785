package acp

import "github.com/agentpool/agentpool/backends"

// contentBlock is an ACP content block of a prompt: text, or an embedded
// text resource. The SDK's ContentBlock encodes itself by way of a
// decoding; these two are simple enough to write as they are on the wire.
type contentBlock struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	Resource *embeddedText `json:"resource,omitempty"`
}

// embeddedText is an embedded resource's text contents.
type embeddedText struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text"`
}

// blocks are the content blocks of prompt p for an agent that takes
// embedded resources (embedded) or not: the briefing, if any, ahead of
// the user's words, as a resource or as a text block of its own.
func blocksOf(p backends.Prompt, embedded bool) []contentBlock {
	user := contentBlock{Type: "text", Text: p.Text}
	if p.Briefing == nil || p.Briefing.Text == "" {
		return []contentBlock{user}
	}
	if embedded {
		return []contentBlock{{Type: "resource", Resource: &embeddedText{URI: p.Briefing.URI, MimeType: backends.BriefingMIMEType, Text: p.Briefing.Text}}, user}
	}
	return []contentBlock{{Type: "text", Text: p.Briefing.Text}, user}
}
