package image

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Definition describes how to build an image. It is read from a JSON file
// (see the package documentation for the format) or taken from the built-in
// definitions.
type Definition struct {
	// Description is free text shown to people.
	Description string `json:"description,omitempty"`
	// Suite is the Debian release to bootstrap, such as "bookworm". Empty
	// means the host's own release.
	Suite string `json:"suite,omitempty"`
	// Packages are Debian packages installed on top of the minimal base,
	// each a name or "name=version".
	Packages []string `json:"packages,omitempty"`
	// Remove are Debian packages purged after the install although other
	// packages depend on them: build-time tools that Debian's dependencies
	// drag in (a compiler, headers) and that the image must not carry.
	Remove []string `json:"remove,omitempty"`
	// NPM are npm packages installed globally under /usr/local, each a name
	// or "name@version".
	NPM []string `json:"npm,omitempty"`
	// Files are written into the root file system after the packages.
	Files []File `json:"files,omitempty"`
	// Checks are shell commands run in the finished image, read-only, as
	// the sandbox user, from /tmp; the build fails unless each exits 0.
	Checks []string `json:"checks,omitempty"`
	// Env is the environment the sandboxes start programs with. It is
	// merged over the defaults (PATH, LANG, HOME and, with npm packages,
	// NODE_PATH).
	Env map[string]string `json:"env,omitempty"`
}

// File is one file added to an image: either inline content or a host file.
type File struct {
	// Path is the absolute path inside the image.
	Path string `json:"path"`
	// Content is the file's text. Exactly one of Content and Source is set.
	Content *string `json:"content,omitempty"`
	// Source is a host file to copy. A relative path is taken from the
	// folder of the definition file.
	Source string `json:"source,omitempty"`
	// Mode is the octal permission, such as "0644" (the default) or "0755".
	Mode string `json:"mode,omitempty"`
}

// Defaults for the image environment and the npm install prefix.
const (
	defaultPath = "/usr/local/bin:/usr/bin:/bin"
	npmPrefix   = "/usr/local"
	npmModules  = npmPrefix + "/lib/node_modules"
	defaultMode = 0o644
)

//go:embed definitions/*.json
var builtinFS embed.FS

var (
	imageNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	suiteRe     = regexp.MustCompile(`^[a-z][a-z0-9-]{1,31}$`)
	debNameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVerRe    = regexp.MustCompile(`^[A-Za-z0-9.+~:-]+$`)
	npmNameRe   = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$`)
	npmVerRe    = regexp.MustCompile(`^[A-Za-z0-9.+~^*<>=-]+$`)
	envKeyRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// forbiddenPackages are Debian packages that would put a package manager
// into an image; images never carry one at run time.
var forbiddenPackages = map[string]bool{
	"apt": true, "apt-utils": true, "aptitude": true, "dpkg": true,
	"npm": true, "python3-pip": true, "pipx": true, "python3-venv": true,
}

// emptyDirs exist in every image and hold nothing but each other: the
// sandboxes mount over them.
var emptyDirs = []string{"/workspace", "/workspace/input", "/workspace/output", "/tmp", "/proc", "/dev", "/sys"}

// ValidateName checks an image name: lowercase letters, digits, '.', '_'
// and '-', at most 63 characters, not starting with a dot, and not "host",
// which names the host's own folders.
func ValidateName(name string) error {
	if !imageNameRe.MatchString(name) || name == "host" {
		return fmt.Errorf("image name %q: want lowercase letters, digits, '.', '_' or '-', not \"host\": %w", name, sandbox.ErrInvalid)
	}
	return nil
}

// Builtin returns the built-in definition of that name, such as "python".
func Builtin(name string) (Definition, error) {
	var data []byte
	err := ValidateName(name)
	if err == nil {
		data, err = builtinFS.ReadFile("definitions/" + name + ".json")
	}
	if err != nil {
		return Definition{}, fmt.Errorf("no built-in image definition %q (have %s): %w",
			name, strings.Join(BuiltinNames(), ", "), sandbox.ErrNotFound)
	}
	def, err := ParseDefinition(bytes.NewReader(data))
	if err != nil {
		return Definition{}, fmt.Errorf("built-in definition %q: %w", name, err)
	}
	return def, nil
}

// BuiltinNames lists the built-in definitions, sorted.
func BuiltinNames() []string {
	entries, _ := builtinFS.ReadDir("definitions")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// LoadDefinition reads and validates a definition file. Relative Source
// paths are made absolute against the file's folder.
func LoadDefinition(file string) (Definition, error) {
	f, err := os.Open(file)
	if err != nil {
		return Definition{}, err
	}
	defer f.Close()
	def, err := ParseDefinition(f)
	if err != nil {
		return Definition{}, fmt.Errorf("%s: %w", file, err)
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return Definition{}, err
	}
	for i, fl := range def.Files {
		if fl.Source != "" && !filepath.IsAbs(fl.Source) {
			def.Files[i].Source = filepath.Join(dir, fl.Source)
		}
	}
	return def, nil
}

// ParseDefinition decodes one JSON definition strictly: unknown fields,
// trailing data and invalid values are refused with an error wrapping
// sandbox.ErrInvalid.
func ParseDefinition(r io.Reader) (Definition, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var def Definition
	if err := dec.Decode(&def); err != nil {
		return Definition{}, fmt.Errorf("decode image definition: %v: %w", err, sandbox.ErrInvalid)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Definition{}, fmt.Errorf("image definition has data after the JSON object: %w", sandbox.ErrInvalid)
	}
	if err := def.Validate(); err != nil {
		return Definition{}, err
	}
	return def, nil
}

// Validate checks every field and returns the first problem found, wrapping
// sandbox.ErrInvalid.
func (d Definition) Validate() error {
	if d.Suite != "" && !suiteRe.MatchString(d.Suite) {
		return invalidf("suite %q is not a Debian release name", d.Suite)
	}
	if err := validatePackages(d.Packages); err != nil {
		return err
	}
	if err := validateRemove(d.Remove, d.Packages); err != nil {
		return err
	}
	if err := validateNPM(d.NPM, d.Packages); err != nil {
		return err
	}
	if err := validateFiles(d.Files); err != nil {
		return err
	}
	for _, c := range d.Checks {
		if strings.TrimSpace(c) == "" || strings.ContainsRune(c, 0) {
			return invalidf("check %q: want a shell command", c)
		}
	}
	return validateEnv(d.Env)
}

func validatePackages(pkgs []string) error {
	seen := map[string]bool{}
	for _, p := range pkgs {
		name, ver, pinned := strings.Cut(p, "=")
		if !debNameRe.MatchString(name) || (pinned && !debVerRe.MatchString(ver)) {
			return invalidf("package %q is not a Debian package name (optionally =version)", p)
		}
		if forbiddenPackages[name] {
			return invalidf("package %q is a package manager; images carry none at run time", name)
		}
		if seen[name] {
			return invalidf("package %q is listed twice", name)
		}
		seen[name] = true
	}
	return nil
}

func validateRemove(remove, install []string) error {
	seen := map[string]bool{}
	for _, p := range remove {
		if !debNameRe.MatchString(p) {
			return invalidf("remove: %q is not a Debian package name", p)
		}
		if hasPackage(install, p) {
			return invalidf("remove: %q is also in packages", p)
		}
		if seen[p] {
			return invalidf("remove: %q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

func validateNPM(specs, debs []string) error {
	if len(specs) > 0 && !hasPackage(debs, "nodejs") {
		return invalidf("npm packages need the Debian package \"nodejs\" in packages")
	}
	seen := map[string]bool{}
	for _, s := range specs {
		name, ver := splitNPMSpec(s)
		if !npmNameRe.MatchString(name) || len(name) > 214 || (ver != "" && !npmVerRe.MatchString(ver)) {
			return invalidf("npm package %q: want name or name@version from the registry", s)
		}
		if seen[name] {
			return invalidf("npm package %q is listed twice", name)
		}
		seen[name] = true
	}
	return nil
}

// splitNPMSpec splits "name@version" and "@scope/name@version"; the
// version is empty when the spec has none.
func splitNPMSpec(spec string) (name, version string) {
	at := strings.LastIndex(spec, "@")
	if at <= 0 {
		return spec, ""
	}
	return spec[:at], spec[at+1:]
}

func hasPackage(pkgs []string, want string) bool {
	for _, p := range pkgs {
		if name, _, _ := strings.Cut(p, "="); name == want {
			return true
		}
	}
	return false
}

func validateFiles(files []File) error {
	seen := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" || strings.ContainsRune(f.Path, 0) {
			return invalidf("file path %q: want a clean absolute path", f.Path)
		}
		for _, dir := range emptyDirs {
			if f.Path == dir || strings.HasPrefix(f.Path, dir+"/") {
				return invalidf("file path %q: %s stays empty in every image", f.Path, dir)
			}
		}
		if (f.Content == nil) == (f.Source == "") {
			return invalidf("file %q: set exactly one of content and source", f.Path)
		}
		if _, err := f.perm(); err != nil {
			return err
		}
		if seen[f.Path] {
			return invalidf("file %q is listed twice", f.Path)
		}
		seen[f.Path] = true
	}
	return nil
}

// perm parses the file's mode; setuid, setgid and sticky bits are refused.
func (f File) perm() (os.FileMode, error) {
	if f.Mode == "" {
		return defaultMode, nil
	}
	m, err := strconv.ParseUint(f.Mode, 8, 32)
	if err != nil || m > 0o777 {
		return 0, invalidf("file %q: mode %q must be octal permissions 0000-0777 (no setuid, setgid or sticky bit)", f.Path, f.Mode)
	}
	return os.FileMode(m), nil
}

func validateEnv(env map[string]string) error {
	for k, v := range env {
		if !envKeyRe.MatchString(k) {
			return invalidf("environment variable name %q is invalid", k)
		}
		if strings.ContainsRune(v, 0) {
			return invalidf("environment variable %s holds a NUL byte", k)
		}
	}
	return nil
}

// Environment returns the environment of an image built from d: the
// defaults with d.Env merged over them.
func (d Definition) Environment() map[string]string {
	env := map[string]string{"PATH": defaultPath, "LANG": "C.UTF-8", "HOME": "/tmp"}
	if len(d.NPM) > 0 {
		env["NODE_PATH"] = npmModules
	}
	for k, v := range d.Env {
		env[k] = v
	}
	return env
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("image definition: "+format+": %w", append(args, sandbox.ErrInvalid)...)
}
