package artifact

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestHiddenNames: a path with a component that starts with a dot is
// rejected by Collect, Check and CheckFile unless AllowHidden is set, and
// a name with a dot elsewhere is not hidden.
func TestHiddenNames(t *testing.T) {
	tests := []struct {
		rel    string
		hidden string // the component the reason names, or "" when not hidden
	}{
		{"report.csv", ""},
		{"a.b.csv", ""},
		{"sub/x.csv", ""},
		{"sub.d/x.csv", ""},
		{".env.txt", ".env.txt"},
		{".hidden.csv", ".hidden.csv"},
		{".git/config.txt", ".git"},
		{"sub/.cache/x.csv", ".cache"},
		{"sub/.x.csv", ".x.csv"},
		{"...csv", "...csv"},
	}
	for _, allow := range []bool{false, true} {
		p := testPolicy()
		p.AllowHidden = allow
		base := t.TempDir()
		for _, tt := range tests {
			writeFileAll(t, filepath.Join(base, tt.rel), "a,1\n")
		}
		arts, err := CollectTo(t.Context(), openDir(t, base), Destination{}, p)
		if err != nil {
			t.Fatal(err)
		}
		byPath := map[string]sandbox.Artifact{}
		for _, a := range arts {
			byPath[a.Path] = a
		}
		for _, tt := range tests {
			refused := tt.hidden != "" && !allow
			// Collect refuses a hidden folder as a whole.
			at := tt.rel
			if refused && tt.hidden != filepath.Base(tt.rel) {
				at = tt.rel[:strings.Index(tt.rel, tt.hidden)+len(tt.hidden)]
			}
			a, ok := byPath[at]
			switch {
			case !ok:
				t.Errorf("allow=%v %s: no artifact at %s (all: %v)", allow, tt.rel, at, arts)
			case refused && (a.Verdict != sandbox.VerdictRejected || !strings.Contains(a.Reason, `hidden name "`+tt.hidden+`"`) ||
				!strings.Contains(a.Reason, "--allow-hidden")):
				t.Errorf("allow=%v Collect %s: %+v, want rejected naming %q and --allow-hidden", allow, tt.rel, a, tt.hidden)
			case !refused && a.Verdict != sandbox.VerdictAccepted:
				t.Errorf("allow=%v Collect %s: %+v, want accepted", allow, tt.rel, a)
			}
			for fn, check := range map[string]func() (sandbox.Artifact, error){
				"Check": func() (sandbox.Artifact, error) {
					return Check(t.Context(), tt.rel, strings.NewReader("a,1\n"), 4, &memOutput{}, p)
				},
				"CheckFile": func() (sandbox.Artifact, error) {
					return CheckFile(t.Context(), openDir(t, base), tt.rel, &memOutput{}, p)
				},
			} {
				a, err := check()
				if err != nil || (a.Verdict == sandbox.VerdictRejected) != refused {
					t.Errorf("allow=%v %s %s: %+v %v, want rejected %v", allow, fn, tt.rel, a, err, refused)
				}
			}
		}
	}
}

func writeFileAll(t *testing.T, p, s string) {
	t.Helper()
	mkdirs(t, filepath.Dir(p))
	writeFile(t, p, s)
}

// TestPolicyAllowHiddenJSON: the switch is "allow_hidden" in a policy and
// survives Normalize.
func TestPolicyAllowHiddenJSON(t *testing.T) {
	var p sandbox.ArtifactPolicy
	if err := json.Unmarshal([]byte(`{"allow_hidden": true}`), &p); err != nil || !Normalize(p).AllowHidden {
		t.Errorf("allow_hidden: %+v %v", p, err)
	}
	if Normalize(sandbox.ArtifactPolicy{}).AllowHidden {
		t.Error("hidden names are allowed by default")
	}
}
