package mcpserver

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// inputSchema is the JSON schema of a tool's input In, as the SDK would
// infer it, with one type per property: the SDK gives a pointer or a slice
// the type ["null", T], which stricter function-calling APIs reject. An
// optional field is one left out of "required" instead.
func inputSchema[In any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("schema of %T: %w", *new(In), err)
	}
	singleTypes(s)
	return s, nil
}

// singleTypes drops "null" from every type list of s and its subschemas,
// so that each has a single type.
func singleTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		ts := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
		if len(ts) == 1 {
			s.Type, s.Types = ts[0], nil
		} else {
			s.Types = ts
		}
	}
	for _, sub := range s.Properties {
		singleTypes(sub)
	}
	for _, sub := range s.Defs {
		singleTypes(sub)
	}
	for _, list := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf, s.AllOf, s.PrefixItems} {
		for _, sub := range list {
			singleTypes(sub)
		}
	}
	singleTypes(s.Items)
	singleTypes(s.AdditionalProperties)
}

// missingRequired names the first string field of in that the tool needs
// (its JSON name has no omitempty) and that is empty, with the field's
// description; "" when none is.
func missingRequired(in any) string {
	v := reflect.ValueOf(in)
	if v.Kind() != reflect.Struct {
		return ""
	}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.String || name == "" || name == "-" || strings.Contains(opts, "omitempty") {
			continue
		}
		if strings.TrimSpace(v.Field(i).String()) == "" {
			if desc := f.Tag.Get("jsonschema"); desc != "" {
				return fmt.Sprintf("%s is required: %s", name, desc)
			}
			return name + " is required"
		}
	}
	return ""
}
