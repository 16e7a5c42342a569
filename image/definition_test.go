package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestParseDefinitionValid(t *testing.T) {
	def, err := ParseDefinition(strings.NewReader(`{
		"description": "demo",
		"suite": "trixie",
		"packages": ["python3", "libfoo2=1.2-3+deb12u1", "g++-12"],
		"remove": ["gcc"],
		"npm": ["nodejs-is-not-here"],
		"files": [
			{"path": "/etc/demo.conf", "content": "x=1\n"},
			{"path": "/usr/local/bin/tool", "source": "tool.sh", "mode": "0755"}
		],
		"checks": ["true"],
		"env": {"MPLBACKEND": "Agg", "PATH": "/opt/bin:/usr/bin:/bin"}
	}`))
	if err == nil || !strings.Contains(err.Error(), "nodejs") {
		t.Fatalf("npm packages without nodejs: %v", err)
	}
	def, err = ParseDefinition(strings.NewReader(`{
		"packages": ["nodejs", "python3"],
		"npm": ["pptxgenjs@4.0.1", "@scope/pkg", "left-pad@^1.3.0"],
		"env": {"PATH": "/opt/bin:/usr/bin:/bin"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	env := def.Environment()
	if env["PATH"] != "/opt/bin:/usr/bin:/bin" || env["NODE_PATH"] != "/usr/local/lib/node_modules" ||
		env["LANG"] != "C.UTF-8" || env["HOME"] != "/tmp" {
		t.Fatalf("environment %v", env)
	}
}

func TestParseDefinitionRefuses(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"unknown field", `{"pakages": ["python3"]}`, "unknown field"},
		{"trailing data", `{"packages": ["python3"]} {}`, "after the JSON"},
		{"not an object", `["python3"]`, "decode"},
		{"bad suite", `{"suite": "Bookworm!"}`, "suite"},
		{"upper-case package", `{"packages": ["Python3"]}`, "Debian package name"},
		{"shell in package", `{"packages": ["python3; rm -rf /"]}`, "Debian package name"},
		{"option as package", `{"packages": ["--allow-unauthenticated"]}`, "Debian package name"},
		{"bad version", `{"packages": ["python3=1 2"]}`, "Debian package name"},
		{"package manager", `{"packages": ["python3-pip"]}`, "package manager"},
		{"twice", `{"packages": ["python3", "python3=3.11"]}`, "twice"},
		{"remove installed", `{"packages": ["gcc"], "remove": ["gcc"]}`, "also in packages"},
		{"remove bad name", `{"remove": ["../gcc"]}`, "Debian package name"},
		{"npm url", `{"packages": ["nodejs"], "npm": ["https://evil.example/x.tgz"]}`, "npm package"},
		{"npm git", `{"packages": ["nodejs"], "npm": ["git+ssh://git@host/x.git"]}`, "npm package"},
		{"npm file", `{"packages": ["nodejs"], "npm": ["file:../x"]}`, "npm package"},
		{"npm alias", `{"packages": ["nodejs"], "npm": ["x@npm:evil@1"]}`, "npm package"},
		{"npm option", `{"packages": ["nodejs"], "npm": ["--unsafe-perm"]}`, "npm package"},
		{"relative path", `{"files": [{"path": "etc/x", "content": ""}]}`, "clean absolute"},
		{"unclean path", `{"files": [{"path": "/etc/../x", "content": ""}]}`, "clean absolute"},
		{"reserved path", `{"files": [{"path": "/workspace/input/x", "content": ""}]}`, "stays empty"},
		{"tmp path", `{"files": [{"path": "/tmp/x", "content": ""}]}`, "stays empty"},
		{"content and source", `{"files": [{"path": "/x", "content": "", "source": "y"}]}`, "exactly one"},
		{"neither", `{"files": [{"path": "/x"}]}`, "exactly one"},
		{"setuid mode", `{"files": [{"path": "/x", "content": "", "mode": "4755"}]}`, "setuid"},
		{"decimal mode", `{"files": [{"path": "/x", "content": "", "mode": "rwx"}]}`, "octal"},
		{"same path twice", `{"files": [{"path": "/x", "content": ""}, {"path": "/x", "content": "2"}]}`, "twice"},
		{"bad env name", `{"env": {"A-B": "1"}}`, "environment variable name"},
		{"NUL in env", `{"env": {"A": "x\u0000y"}}`, "NUL"},
		{"empty check", `{"checks": ["  "]}`, "check"},
	} {
		_, err := ParseDefinition(strings.NewReader(tc.json))
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestBuiltinPython(t *testing.T) {
	if got := BuiltinNames(); len(got) == 0 || got[0] != "python" {
		t.Fatalf("built-in names %v", got)
	}
	def, err := Builtin("python")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"python3-pandas", "python3-matplotlib", "python3-openpyxl", "nodejs", "fonts-dejavu-core"} {
		if !hasPackage(def.Packages, want) {
			t.Errorf("python definition lacks %s", want)
		}
	}
	if !hasPackage(def.Remove, "gcc") || len(def.NPM) != 1 || !strings.HasPrefix(def.NPM[0], "pptxgenjs@") {
		t.Errorf("python definition: remove %v npm %v", def.Remove, def.NPM)
	}
	if def.Environment()["NODE_PATH"] == "" {
		t.Error("python image has no NODE_PATH")
	}
	for _, name := range []string{"nope", "../definitions/python", "host", ""} {
		if _, err := Builtin(name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Builtin(%q): %v, want ErrNotFound", name, err)
		}
	}
}

func TestLoadDefinitionResolvesSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "image.json")
	body := `{"files": [{"path": "/etc/a", "source": "a.txt"}, {"path": "/etc/b", "source": "/abs/b.txt"}]}`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := LoadDefinition(file)
	if err != nil {
		t.Fatal(err)
	}
	if def.Files[0].Source != filepath.Join(dir, "a.txt") || def.Files[1].Source != "/abs/b.txt" {
		t.Fatalf("sources %q %q", def.Files[0].Source, def.Files[1].Source)
	}
	if err := os.WriteFile(file, []byte(`{"files": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDefinition(file); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), file) {
		t.Fatalf("bad file: %v", err)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"python", "py3.11", "my_image-2", "a"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "host", ".build-x", "-x", "Py", "a/b", "..", strings.Repeat("a", 64)} {
		if err := ValidateName(bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}
