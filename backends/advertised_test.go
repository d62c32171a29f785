package backends

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfigOptions(t *testing.T) {
	raw := json.RawMessage(`[
		{"id":"model","name":"Model","category":"model","type":"select","currentValue":"b",
		 "options":[{"value":"a","name":"A","description":"first"},{"value":"b","name":"B"}]},
		{"id":"effort","name":"Effort","type":"select","currentValue":"hi",
		 "options":[{"group":"g1","name":"Fast ones","options":[{"value":"lo","name":"Low"}]},{"group":"g2","name":"Slow ones","options":[{"value":"hi","name":"High"}]}]},
		{"id":"think","name":"Think","type":"boolean","currentValue":true},
		{"id":"future","name":"Future","type":"slider","currentValue":3},
		{"id":"untyped","name":"Untyped","currentValue":"x","options":[{"value":"x","name":"X"}]}
	]`)
	got, err := ParseConfigOptions(raw)
	if err != nil {
		t.Fatalf("ParseConfigOptions error = %v", err)
	}
	want := []ConfigOption{
		{ID: "model", Name: "Model", Category: "model", Type: OptionSelect, Current: "b",
			Choices: []Choice{{Value: "a", Name: "A", Description: "first"}, {Value: "b", Name: "B"}}},
		{ID: "effort", Name: "Effort", Type: OptionSelect, Current: "hi",
			Choices: []Choice{{Value: "lo", Name: "Low", Group: "Fast ones"}, {Value: "hi", Name: "High", Group: "Slow ones"}}},
		{ID: "think", Name: "Think", Type: OptionBoolean, Current: "true"},
		{ID: "untyped", Name: "Untyped", Type: OptionSelect, Current: "x", Choices: []Choice{{Value: "x", Name: "X"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseConfigOptions (-want +got):\n%s", diff)
	}
	if _, err := ParseConfigOptions(json.RawMessage(`{"not":"a list"}`)); err == nil {
		t.Errorf("ParseConfigOptions(object) error = nil; want an error")
	}
	a := Advertised{Options: got}
	if o, ok := a.Option("model"); !ok || !o.Allows("a") || o.Allows("c") {
		t.Errorf("Option(model) = %+v, %v; want it, allowing a and not c", o, ok)
	}
	if o, ok := a.Option("think"); !ok || !o.Allows("false") || o.Allows("yes") {
		t.Errorf("Option(think) = %+v, %v; want a boolean allowing false, not yes", o, ok)
	}
	if _, ok := a.Option("nope"); ok {
		t.Errorf("Option(nope) found; want not")
	}
}

func TestOptionByCategory(t *testing.T) {
	a := Advertised{Options: []ConfigOption{{ID: "llm", Category: "model"}, {ID: "t1", Category: "thought_level"}, {ID: "t2", Category: "thought_level"}}}
	if o, ok := a.Option("model"); !ok || o.ID != "llm" {
		t.Errorf("Option(model) = %+v, %v; want llm by its category", o, ok)
	}
	if o, ok := a.Option("thought_level"); ok {
		t.Errorf("Option(thought_level) = %+v; want none: two options share the category", o)
	}
}

func TestParseCommands(t *testing.T) {
	got, err := ParseCommands(json.RawMessage(`[{"name":"/init","description":"Make AGENTS.md"},
		{"name":"review","description":"Review","input":{"hint":"what to review"}},{"name":"","description":"nameless"}]`))
	want := []Command{{Name: "init", Description: "Make AGENTS.md"}, {Name: "review", Description: "Review", Hint: "what to review"}}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("ParseCommands = %+v, %v; want %+v", got, err, want)
	}
}

func TestAdvertisedApply(t *testing.T) {
	a := AdvertisedFrom(Info{Modes: []Mode{{ID: "ask"}, {ID: "code"}}, CurrentMode: "ask",
		ConfigOptions: json.RawMessage(`[{"id":"model","name":"M","type":"select","currentValue":"a","options":[{"value":"a","name":"A"}]}]`),
		Commands:      json.RawMessage(`[{"name":"help","description":"Help"}]`)})
	steps := []struct {
		ev      Event
		changed bool
	}{
		{Event{Type: EventMode, Data: json.RawMessage(`{"sessionUpdate":"current_mode_update","currentModeId":"code"}`)}, true},
		{Event{Type: EventMode, Data: json.RawMessage(`{"mode":"code"}`)}, false},
		{Event{Type: EventCommands, Data: json.RawMessage(`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"init","description":"Init"}]}`)}, true},
		{Event{Type: EventConfig, Data: json.RawMessage(`{"sessionUpdate":"config_option_update","configOptions":[]}`)}, true},
		{Event{Type: EventConfig, Data: json.RawMessage(`{"other":1}`)}, false},
		{Event{Type: EventMessageChunk, Data: json.RawMessage(`{"mode":"ask"}`)}, false},
		{Event{Type: EventMode, Data: json.RawMessage(`not json`)}, false},
	}
	for i, s := range steps {
		if got := a.Apply(s.ev); got != s.changed {
			t.Errorf("step %d: Apply(%s %s) = %v; want %v", i, s.ev.Type, s.ev.Data, got, s.changed)
		}
	}
	want := Advertised{Modes: []Mode{{ID: "ask"}, {ID: "code"}}, CurrentMode: "code", Options: []ConfigOption{},
		Commands: []Command{{Name: "init", Description: "Init"}}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("after the updates (-want +got):\n%s", diff)
	}
}
