package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
)

// maxManifestBytes caps a package.json, which is read whole to be parsed.
// Real ones are a few kilobytes; a lock file is another name.
const maxManifestBytes = 4 << 20

// installScripts are the package.json scripts that npm, yarn or pnpm run
// on their own, without being named, when the folder is installed, packed,
// or installed from as a git dependency. A package.json that names one
// makes a plain "npm install" on the host run code that the sandboxed
// program chose.
var installScripts = []string{
	"preinstall", "install", "postinstall",
	"prepublish", "preprepare", "prepare", "postprepare",
	"prepack", "postpack", "dependencies", "pnpm:devPreinstall",
}

// isManifest reports whether a path names a package.json, in any case
// (case-insensitive file systems open it as package.json).
func isManifest(name string) bool {
	return strings.EqualFold(path.Base(name), "package.json")
}

// checkManifest copies a package.json from r to w, or returns why it is
// refused: it has install scripts, it is too large to parse, or it is not
// a JSON object (so what it asks a package manager to run cannot be told).
//
// Such a file is rejected, not sanitized: dropping the scripts would
// rewrite a file whose consumer executes what it says, silently changing
// what the package does, and a package.json that asks to run code on
// install is the very thing the sandbox keeps in. A user who wants it
// still has it inside the sandbox, and can read it there.
func checkManifest(r io.Reader, w io.Writer) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxManifestBytes {
		return fmt.Sprintf("package.json over %d bytes: too large to check for install scripts", maxManifestBytes), nil
	}
	// npm strips a byte order mark before parsing; so does this.
	var m struct {
		Scripts map[string]json.RawMessage `json:"scripts"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(b, []byte("\uFEFF")), &m); err != nil {
		return fmt.Sprintf("package.json is not a JSON object whose scripts can be read (%v), so install scripts cannot be ruled out", err), nil
	}
	var found []string
	for _, s := range installScripts {
		if _, ok := m.Scripts[s]; ok {
			found = append(found, s)
		}
	}
	if len(found) > 0 {
		return fmt.Sprintf("package.json has install scripts (%s) that npm, yarn or pnpm would run on the host", strings.Join(found, ", ")), nil
	}
	_, err = w.Write(b)
	return "", err
}
