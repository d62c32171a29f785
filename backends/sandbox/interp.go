package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// interpreter says how an interpreter's command line names its script.
type interpreter struct {
	// valued are the options that take the next argument as their value.
	valued []string
	// files are the valued options whose value is a file the program
	// loads (node's --require): granted like the script.
	files []string
	// inline are the options after which there is no script (the code is
	// on the command line, or a module is named): the search stops.
	inline []string
	// subcommands are words that may come before the script ("run").
	subcommands []string
	// last are the file options that name the program itself (java's
	// -jar): the search ends with their value.
	last []string
}

// interpreters maps a program's name, without a version suffix, to how
// its script is found. Shells are interpreters too.
var interpreters = map[string]interpreter{
	"node":    nodeArgs,
	"nodejs":  nodeArgs,
	"tsx":     nodeArgs,
	"ts-node": nodeArgs,
	"bun": {valued: []string{"--cwd", "--config", "-c", "--preload", "-r", "--env-file", "--tsconfig-override"},
		files: []string{"--preload", "-r"}, inline: []string{"-e", "--eval", "-p", "--print", "x", "exec", "add", "install", "i", "create"},
		subcommands: []string{"run"}},
	"deno": {valued: []string{"--config", "-c", "--import-map", "--lock", "--location", "--cert", "--env-file"},
		inline: []string{"eval", "repl", "install", "upgrade"}, subcommands: []string{"run", "serve", "test", "task"}},
	"python": pythonArgs,
	"pypy":   pythonArgs,
	"uv": {valued: []string{"--with", "--python", "-p", "--project", "--directory", "--env-file", "--index", "--extra", "--group",
		"--with-requirements", "--cache-dir", "--config-file"},
		inline: []string{"-m", "--module", "tool", "pip", "add", "sync", "lock", "init", "venv"}, subcommands: []string{"run"}},
	"uvx":  {inline: []string{"--from"}},
	"ruby": {valued: []string{"-I", "-r", "-C"}, inline: []string{"-e"}},
	"perl": {valued: []string{"-I", "-M", "-m"}, inline: []string{"-e", "-E"}},
	"php":  {valued: []string{"-c", "-d", "-z"}, files: []string{"-f"}, last: []string{"-f"}, inline: []string{"-r", "-a"}},
	"java": {valued: []string{"-cp", "-classpath", "--class-path", "-p", "--module-path"}, files: []string{"-jar"}, last: []string{"-jar"},
		inline: []string{"-m", "--module"}},
	"sh":   shellArgs,
	"bash": shellArgs,
	"dash": shellArgs,
	"zsh":  shellArgs,
}

var (
	nodeArgs = interpreter{
		valued: []string{"-r", "--require", "--import", "--loader", "--experimental-loader", "--env-file", "--conditions", "-C",
			"--input-type", "--title", "--inspect-port", "--max-old-space-size", "--stack-size"},
		files:  []string{"-r", "--require", "--import", "--loader", "--experimental-loader"},
		inline: []string{"-e", "--eval", "-p", "--print"},
	}
	pythonArgs = interpreter{valued: []string{"-W", "-X", "-Q"}, inline: []string{"-c", "-m"}}
	shellArgs  = interpreter{valued: []string{"-o", "+o", "-O", "+O"}, inline: []string{"-c", "-s", "-i"}}
)

// interpreterOf returns how the arguments of the program at exe name its
// script, or false when it is no interpreter this package knows. Both the
// name it was given and the file it resolves to are tried ("python3" →
// "python3.11").
func interpreterOf(exe string) (interpreter, bool) {
	names := []string{filepath.Base(exe)}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		names = append(names, filepath.Base(real))
	}
	for _, n := range names {
		if in, ok := interpreters[strings.TrimRight(n, "0123456789.-")]; ok {
			return in, true
		}
	}
	return interpreter{}, false
}

// scriptFiles returns the files an interpreter command runs or loads: the
// first argument that names an existing file (absolute, or relative to
// dir), and the values of options that load files. Nothing when exe is
// no interpreter, or its code is inline (-e, -c, -m).
func scriptFiles(exe string, args []string, dir, path string) []string {
	in, ok := interpreterOf(exe)
	if !ok {
		// A #! script's interpreter runs the script itself, which is
		// the program: already readable.
		return nil
	}
	var out []string
	file := func(arg string) (string, bool) {
		if arg == "" {
			return "", false
		}
		if !filepath.IsAbs(arg) {
			if dir == "" {
				return "", false
			}
			arg = filepath.Join(dir, arg)
		}
		fi, err := os.Stat(arg)
		if err != nil || !fi.Mode().IsRegular() {
			return "", false
		}
		return filepath.Clean(arg), true
	}
	positional := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				if f, ok := file(args[i+1]); ok {
					out = append(out, f)
				}
			}
			return out
		}
		if len(a) > 1 && (a[0] == '-' || (a[0] == '+' && slices.Contains(in.valued, a))) {
			name, value, hasValue := strings.Cut(a, "=")
			if slices.Contains(in.inline, name) {
				return out
			}
			if !hasValue && (slices.Contains(in.valued, name) || slices.Contains(in.files, name)) && i+1 < len(args) {
				i++
				value, hasValue = args[i], true
			}
			if hasValue && slices.Contains(in.files, name) {
				if f, ok := file(value); ok {
					out = append(out, f)
				}
				if slices.Contains(in.last, name) {
					return out
				}
			}
			continue
		}
		if f, ok := file(a); ok {
			return append(out, f)
		}
		positional++
		if slices.Contains(in.inline, a) || positional > 1 || !slices.Contains(in.subcommands, a) {
			return out
		}
	}
	return out
}

// packageRoot is the directory to grant for reading with the script at
// file: its node_modules package ("node_modules/pkg" or
// "node_modules/@scope/pkg"), else the root of the virtual environment it
// lies in (the directory holding pyvenv.cfg), else its directory.
func packageRoot(file string) string {
	dir := filepath.Dir(file)
	if root, ok := nodePackage(dir); ok {
		return root
	}
	sep := string(filepath.Separator)
	if strings.Contains(dir, sep+"site-packages") || strings.Contains(dir, sep+"dist-packages") ||
		filepath.Base(dir) == "bin" {
		// A virtual environment: its root holds pyvenv.cfg.
		for d := dir; d != sep && d != "."; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "pyvenv.cfg")); err == nil {
				return d
			}
		}
	}
	return dir
}
