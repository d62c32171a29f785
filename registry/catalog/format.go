package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/agentpool/agentpool/registry"
)

// MaxDocument is the largest registry document Parse accepts (the public
// registry is about 30 KB).
const MaxDocument = 1 << 20

// Distribution kinds of the registry format.
const (
	KindNPX    = "npx"
	KindUVX    = "uvx"
	KindBinary = "binary"
)

// ErrInvalid matches (errors.Is) every *FieldError: the document was
// refused.
var ErrInvalid = errors.New("invalid catalog document")

// FieldError is one problem of a registry document: the JSON path of the
// value (e.g. "agents[2].distribution.npx.package") and what is wrong.
// Parse joins them with errors.Join.
type FieldError struct {
	Path string
	Msg  string
}

// Error formats the problem as "path: message".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// FieldErrors lists every *FieldError joined in err.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// Document is a registry document (registry.json).
type Document struct {
	// Version is the format's version, "1.0.0" today.
	Version string  `json:"version"`
	Agents  []Agent `json:"agents"`
	// Extensions are kept as they are: agentpool does not use them.
	Extensions []json.RawMessage `json:"extensions,omitempty"`
}

// Agent is one agent of the registry.
type Agent struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Description  string       `json:"description"`
	Repository   string       `json:"repository,omitempty"`
	Authors      []string     `json:"authors,omitempty"`
	License      string       `json:"license,omitempty"`
	Icon         string       `json:"icon,omitempty"`
	Distribution Distribution `json:"distribution"`
}

// Distribution says how an agent is installed and run; at least one kind
// is set. Kinds agentpool does not know are dropped when parsed.
type Distribution struct {
	NPX *Package `json:"npx,omitempty"`
	UVX *Package `json:"uvx,omitempty"`
	// Binary maps a platform ("linux-x86_64") to its archive.
	Binary map[string]BinaryTarget `json:"binary,omitempty"`
}

// Package is an npm (npx) or PyPI (uvx) package: its name, optionally
// with a version ("@scope/pkg@1.2.3", "pkg==1.0"), and the arguments and
// environment that make it speak ACP.
type Package struct {
	Package string            `json:"package"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// BinaryTarget is a platform's archive: where to download it, the program
// inside it (relative to where it is unpacked), its arguments and
// environment.
type BinaryTarget struct {
	Archive string            `json:"archive"`
	Cmd     string            `json:"cmd"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

var (
	// agentIDPattern is the registry's own rule for ids (agent.schema.json).
	agentIDPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	// versionPattern is the registry's: a semantic version prefix.
	versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+`)
	// agentVersionPattern is a whole semantic version: an agent's version
	// names a directory of its install (AgentsDir/ID/VERSION) and goes into
	// commands, so it holds no '/' or shell word.
	agentVersionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]*)?$`)
	// envNamePattern is a portable environment variable name.
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Parse reads and checks a registry document. Unknown fields, distribution
// kinds and platforms are tolerated (a newer registry still loads); a
// missing or wrong required field, an id that cannot name a provider, or a
// duplicate id refuses the whole document: the error joins a *FieldError
// for each problem, and matches ErrInvalid.
func Parse(data []byte) (*Document, error) {
	if len(data) > MaxDocument {
		return nil, &FieldError{Msg: fmt.Sprintf("document is %d bytes, over the limit of %d", len(data), MaxDocument)}
	}
	var top struct {
		Version    *string           `json:"version"`
		Agents     []json.RawMessage `json:"agents"`
		Extensions []json.RawMessage `json:"extensions"`
	}
	if err := decodeOne(data, &top); err != nil {
		return nil, &FieldError{Msg: "not a registry document: " + err.Error()}
	}
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	doc := &Document{Extensions: top.Extensions}
	switch {
	case top.Version == nil:
		bad("version", "required")
	case !versionPattern.MatchString(*top.Version):
		bad("version", "%q is not a version (want MAJOR.MINOR.PATCH)", *top.Version)
	default:
		doc.Version = *top.Version
	}
	if top.Agents == nil {
		bad("agents", "required: the list of agents")
	}
	seen := map[string]int{}
	for i, raw := range top.Agents {
		p := fmt.Sprintf("agents[%d]", i)
		a, aerrs := parseAgent(p, raw)
		errs = append(errs, aerrs...)
		if a == nil {
			continue
		}
		if j, dup := seen[a.ID]; dup {
			bad(p+".id", "%q is also the id of agents[%d]", a.ID, j)
			continue
		}
		seen[a.ID] = i
		doc.Agents = append(doc.Agents, *a)
	}
	if len(errs) > 0 {
		// Distributions are maps: sort for a stable report.
		slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.(*FieldError).Path, b.(*FieldError).Path) })
		return nil, errors.Join(errs...)
	}
	return doc, nil
}

// decodeOne decodes exactly one JSON value from data into v.
func decodeOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the document")
	}
	return nil
}

// parseAgent checks one agent at JSON path p; it returns nil when the
// agent is unusable.
func parseAgent(p string, raw json.RawMessage) (*Agent, []error) {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	var a struct {
		Agent
		Distribution map[string]json.RawMessage `json:"distribution"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, []error{typeError(p, err)}
	}
	switch {
	case a.ID == "":
		bad(p+".id", "required")
	case !agentIDPattern.MatchString(a.ID):
		bad(p+".id", "%q is not a registry id (want lowercase letters, digits and '-', starting with a letter)", a.ID)
	default:
		if err := registry.CheckID(a.ID); err != nil {
			bad(p+".id", "%v", err)
		}
	}
	if strings.TrimSpace(a.Name) == "" {
		bad(p+".name", "required")
	}
	if a.Version == "" {
		bad(p+".version", "required")
	} else if !agentVersionPattern.MatchString(a.Version) {
		bad(p+".version", "%q is not a version (want MAJOR.MINOR.PATCH, with an optional -pre or +build suffix)", a.Version)
	}
	if strings.TrimSpace(a.Description) == "" {
		bad(p+".description", "required")
	}
	out := a.Agent
	out.Distribution = Distribution{}
	if len(a.Distribution) == 0 {
		bad(p+".distribution", "required: at least one of npx, uvx or binary")
	}
	for kind, body := range a.Distribution {
		dp := p + ".distribution." + kind
		switch kind {
		case KindNPX, KindUVX:
			pkg, perrs := parsePackage(dp, body)
			errs = append(errs, perrs...)
			if kind == KindNPX {
				out.Distribution.NPX = pkg
			} else {
				out.Distribution.UVX = pkg
			}
		case KindBinary:
			bin, berrs := parseBinary(dp, body)
			errs = append(errs, berrs...)
			out.Distribution.Binary = bin
		}
		// Other kinds: a newer registry's; agentpool cannot use them.
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &out, nil
}

// parsePackage checks an npx or uvx distribution.
func parsePackage(p string, raw json.RawMessage) (*Package, []error) {
	var pkg Package
	if err := json.Unmarshal(raw, &pkg); err != nil {
		return nil, []error{typeError(p, err)}
	}
	var errs []error
	name := strings.TrimSpace(pkg.Package)
	switch {
	case name == "":
		errs = append(errs, &FieldError{Path: p + ".package", Msg: "required: the package name"})
	case name != pkg.Package || strings.HasPrefix(name, "-") || strings.ContainsAny(name, " \t\n'\"\\`$;&|<>"):
		errs = append(errs, &FieldError{Path: p + ".package", Msg: fmt.Sprintf("%q is not a package name", pkg.Package)})
	}
	errs = append(errs, checkEnv(p+".env", pkg.Env)...)
	return &pkg, errs
}

// parseBinary checks a binary distribution; unknown platforms are kept
// (and never chosen).
func parseBinary(p string, raw json.RawMessage) (map[string]BinaryTarget, []error) {
	var bin map[string]BinaryTarget
	if err := json.Unmarshal(raw, &bin); err != nil {
		return nil, []error{typeError(p, err)}
	}
	var errs []error
	if len(bin) == 0 {
		errs = append(errs, &FieldError{Path: p, Msg: "required: at least one platform"})
	}
	for plat, t := range bin {
		tp := p + "." + plat
		if u, err := url.Parse(t.Archive); t.Archive == "" {
			errs = append(errs, &FieldError{Path: tp + ".archive", Msg: "required: the archive's URL"})
		} else if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, &FieldError{Path: tp + ".archive", Msg: fmt.Sprintf("%q is not an http(s) URL", t.Archive)})
		}
		cmd := path.Clean(strings.TrimPrefix(t.Cmd, "./"))
		switch {
		case t.Cmd == "":
			errs = append(errs, &FieldError{Path: tp + ".cmd", Msg: "required: the program inside the archive"})
		case strings.HasPrefix(t.Cmd, "/") || cmd == ".." || strings.HasPrefix(cmd, "../") || strings.ContainsAny(t.Cmd, "\\\n"):
			errs = append(errs, &FieldError{Path: tp + ".cmd", Msg: fmt.Sprintf("%q must be a path inside the archive", t.Cmd)})
		}
		errs = append(errs, checkEnv(tp+".env", t.Env)...)
	}
	return bin, errs
}

// checkEnv checks environment variable names.
func checkEnv(p string, env map[string]string) []error {
	var errs []error
	for k := range env {
		if !envNamePattern.MatchString(k) {
			errs = append(errs, &FieldError{Path: p + "." + k, Msg: fmt.Sprintf("%q is not an environment variable name", k)})
		}
	}
	return errs
}

// typeError names the field of a JSON type mismatch under p.
func typeError(p string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := p
		if te.Field != "" {
			// parseAgent decodes through an embedded Agent.
			f += "." + strings.TrimPrefix(te.Field, "Agent.")
		}
		return &FieldError{Path: f, Msg: fmt.Sprintf("want a JSON %s, got %s", jsonKind(te), te.Value)}
	}
	return &FieldError{Path: p, Msg: err.Error()}
}

// jsonKind names the JSON type Go wanted.
func jsonKind(te *json.UnmarshalTypeError) string {
	switch te.Type.Kind().String() {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	}
	return te.Type.String()
}
