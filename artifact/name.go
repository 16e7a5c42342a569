package artifact

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameLen is the longest path component Linux file systems take.
const maxNameLen = 255

// checkName returns why one path component is refused, or "" when it is
// fine. It refuses empty names, "." and "..", names longer than 255 bytes,
// names that are not valid UTF-8, and names holding a slash, a backslash, a
// control character (C0, DEL, C1) or an invisible formatting character such
// as a bidirectional override, which can make "gpj.exe" look like "exe.jpg".
func checkName(name string) string {
	switch {
	case name == "":
		return "empty name"
	case name == "." || name == "..":
		return fmt.Sprintf("name %q refers to a folder itself", name)
	case len(name) > maxNameLen:
		return fmt.Sprintf("name is %d bytes long, over %d", len(name), maxNameLen)
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	}
	for _, r := range name {
		switch {
		case r == '/' || r == '\\':
			return "name contains a slash or backslash"
		case r == 0:
			return "name contains NUL"
		case unicode.IsControl(r):
			return "name contains a control character"
		case unicode.Is(unicode.Cf, r):
			return "name contains an invisible formatting character"
		}
	}
	return ""
}

// checkPath returns why a relative, slash-separated path is refused, or "":
// it must not be absolute, every component must pass checkName, and the
// path must stay within the depth and length caps.
func checkPath(rel string, maxDepth, maxLen int) string {
	if rel == "" {
		return "empty path"
	}
	if strings.HasPrefix(rel, "/") {
		return "absolute path"
	}
	if len(rel) > maxLen {
		return fmt.Sprintf("path is %d bytes long, over the cap of %d", len(rel), maxLen)
	}
	parts := strings.Split(rel, "/")
	if len(parts) > maxDepth {
		return fmt.Sprintf("path has %d components, over the depth cap of %d", len(parts), maxDepth)
	}
	for _, part := range parts {
		if why := checkName(part); why != "" {
			return why
		}
	}
	return ""
}

// checkHidden returns why a relative, slash-separated path is refused for
// a hidden component (a name that starts with a dot, such as ".env" or
// ".git"), or "" when it has none or the policy allows them. Tools read
// such files without being asked (.npmrc, .envrc, .git/hooks), and
// listings leave them out, so they do not leave by default.
func (c *checker) checkHidden(rel string) string {
	if c.p.AllowHidden {
		return ""
	}
	for part := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(part, ".") {
			return fmt.Sprintf("hidden name %q (starts with a dot); hidden files and folders are refused unless allowed (allow_hidden, --allow-hidden)", part)
		}
	}
	return ""
}

// displayPath writes rel so that it is printable and valid UTF-8, as the
// Path of an artifact: a path that passes checkName in every component is
// kept as it is; any other is written with Go escapes (\x01, \xff, \u202e)
// and without surrounding quotes, so that reports never carry raw control
// bytes into a terminal or a JSON encoder.
func displayPath(rel string) string {
	clean := true
	for part := range strings.SplitSeq(rel, "/") {
		if checkName(part) != "" {
			clean = false
			break
		}
	}
	if clean {
		return rel
	}
	q := strconv.QuoteToASCII(rel)
	return q[1 : len(q)-1]
}
