package catalog

import "strings"

// UnsafeEnv reports whether an environment variable lets whoever sets it
// run other code in a program (or in the loader, a shell or an
// interpreter it starts), open programs of its choosing, or send the
// program's connections through servers of its choosing: LD_*, DYLD_*,
// NODE_OPTIONS, PYTHON*, GIT_CONFIG*, GIT_SSH*, EDITOR, BROWSER, *_PROXY
// (any case), SSL_CERT_* and the like. An agent's or a catalog's word
// must not put one into a command the user runs or a provider's
// environment.
func UnsafeEnv(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range []string{"LD_", "DYLD_", "PYTHON", "GIT_CONFIG", "GIT_SSH", "SSL_CERT_"} {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	if strings.HasSuffix(up, "_PROXY") {
		return true
	}
	switch up {
	case "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "PS4", "PROMPT_COMMAND", "IFS",
		"NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS",
		"PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
		"JDK_JAVA_OPTIONS", "GCONV_PATH", "LOCPATH", "GIT_EXEC_PATH", "GIT_ASKPASS", "SSH_ASKPASS",
		"EDITOR", "VISUAL", "PAGER", "BROWSER", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE":
		return true
	}
	return false
}
