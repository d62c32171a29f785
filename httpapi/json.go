package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: &Error{Code: CodeInternal, Message: "encode answer: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// readBody reads the whole (size-limited) request body. An over-long body
// is a 413.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
				Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, badRequest("", "read request body: %v", err)
	}
	return b, nil
}

// checkJSONType refuses a body declared as something other than JSON. An
// absent Content-Type is accepted, for curl's sake.
func checkJSONType(r *http.Request, allowed ...string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		if mt == "application/json" {
			return nil
		}
		for _, a := range allowed {
			if mt == a {
				return nil
			}
		}
	}
	return &Error{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMedia, Field: "Content-Type",
		Message: fmt.Sprintf("Content-Type %q is not application/json", ct)}
}

// decodeJSON decodes the request body strictly into v: one JSON value,
// no unknown fields, nothing after it. An empty body is an error when
// required, and leaves v alone otherwise. Errors are 400s naming the field
// where one is known, or 413 for an over-long body.
func decodeJSON(r *http.Request, v any, required bool) error {
	if err := checkJSONType(r); err != nil {
		return err
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if required {
			return badRequest("", "request body is empty; want a JSON object")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "unexpected data after the JSON value at offset %d", dec.InputOffset())
	}
	return nil
}

// jsonError turns a decoding error into a 400 naming the problem.
func jsonError(err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("", "malformed JSON at offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("", "the body must be a JSON object, not %s", te.Value)
		}
		field := jsonPath(te.Field)
		return badRequest(field, "field %q must be %s, not %s", field, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("", "malformed JSON: unexpected end of the body")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return badRequest(f, "unknown field %q", f)
	}
	return badRequest("", "malformed JSON: %v", err)
}

// jsonKind names a Go kind the way a JSON user thinks of it.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a " + k
}

// boolParam parses an optional boolean query parameter.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(name, "parameter %q must be true or false, not %q", name, v)
	}
	return b, nil
}

// intParam parses an optional non-negative integer query parameter.
func intParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	return parseSeq(name, v)
}

// parseSeq parses a non-negative integer named name.
func parseSeq(name, v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest(name, "%s must be a non-negative integer, not %q", name, v)
	}
	return n, nil
}

// jsonPath is the path of a field as the request names it: encoding/json
// puts the Go names of embedded structs in it (CreateRequest.repo), which
// the request does not have. JSON names here are never capitalized.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}
