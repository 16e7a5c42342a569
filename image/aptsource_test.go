package image

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestReadHostAptOneLine(t *testing.T) {
	srcs, err := readHostApt("testdata/apt/oneline")
	if err != nil {
		t.Fatal(err)
	}
	want := aptSources{
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main", "contrib"}},
		{Types: []string{"deb-src"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm-updates"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://security.example/debian-security"}, Suites: []string{"bookworm-security"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"trixie"}, Components: []string{"main"}},
		{Types: []string{"deb"}, URIs: []string{"http://vendor.example/apt"}, Suites: []string{"stable"}, Components: []string{"main"}},
	}
	if !reflect.DeepEqual(srcs, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", srcs, want)
	}
}

func TestReadHostAptDeb822(t *testing.T) {
	srcs, err := readHostApt("testdata/apt/deb822")
	if err != nil {
		t.Fatal(err)
	}
	// disabled.sources says "Enabled: no"; the .disabled-by-admin file has
	// an extension apt ignores.
	want := aptSources{
		{Types: []string{"deb"}, URIs: []string{"http://mirror.example/debian"}, Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"}},
		{Types: []string{"deb", "deb-src"}, URIs: []string{"http://security.example/debian-security"}, Suites: []string{"bookworm-security"}, Components: []string{"main"}},
	}
	if !reflect.DeepEqual(srcs, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", srcs, want)
	}
}

func TestPlanFromHostSources(t *testing.T) {
	wantBookworm := []string{
		"deb http://mirror.example/debian bookworm main",
		"deb http://mirror.example/debian bookworm-updates main",
		"deb http://security.example/debian-security bookworm-security main",
	}
	for _, tc := range []struct {
		dir, suite string
		mirror     string
		lines      []string
	}{
		{"testdata/apt/deb822", "bookworm", "http://mirror.example/debian", wantBookworm},
		{"testdata/apt/deb822", "trixie", "http://mirror.example/debian", []string{
			"deb http://mirror.example/debian trixie main",
			"deb http://mirror.example/debian trixie-updates main",
			"deb http://security.example/debian-security trixie-security main",
		}},
		{"testdata/apt/oneline", "bookworm", "http://mirror.example/debian", []string{
			"deb http://mirror.example/debian bookworm main contrib",
			"deb http://mirror.example/debian bookworm-updates main",
			"deb http://security.example/debian-security bookworm-security main",
		}},
		// sources.list comes first, then sources.list.d in name order; the
		// first entry of the exact suite with "main" is the mirror.
		{"testdata/apt/mixed", "bookworm", "http://second.example/debian", []string{
			"deb http://first.example/debian bookworm-backports main",
			"deb http://third.example/debian bookworm non-free",
			"deb http://second.example/debian bookworm main",
		}},
	} {
		srcs, err := readHostApt(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := srcs.plan("bookworm", tc.suite, "")
		if err != nil {
			t.Fatalf("%s %s: %v", tc.dir, tc.suite, err)
		}
		if p.Mirror != tc.mirror || !reflect.DeepEqual(p.Lines, tc.lines) {
			t.Errorf("%s %s: mirror %q lines %q, want %q %q", tc.dir, tc.suite, p.Mirror, p.Lines, tc.mirror, tc.lines)
		}
	}
}

func TestPlanOverrideAndMissingMirror(t *testing.T) {
	p, err := aptSources(nil).plan("bookworm", "trixie", "http://override.example/debian")
	if err != nil {
		t.Fatal(err)
	}
	if p.Mirror != "http://override.example/debian" || !reflect.DeepEqual(p.Lines, []string{"deb http://override.example/debian trixie main"}) {
		t.Fatalf("override plan %+v", p)
	}
	srcs, err := readHostApt("testdata/apt/oneline")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srcs.plan("bullseye", "bullseye", ""); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("plan for a release the host lacks: %v, want ErrUnsupported", err)
	}
	// "bookwormish" must not pass for a companion suite of "bookworm".
	odd := aptSources{{Types: []string{"deb"}, URIs: []string{"http://x.example"}, Suites: []string{"bookwormish"}, Components: []string{"main"}}}
	if _, err := odd.plan("bookworm", "bookworm", ""); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("plan with only bookwormish: %v, want ErrUnsupported", err)
	}
}

func TestParseSourcesErrors(t *testing.T) {
	for _, bad := range []string{
		"deb http://x.example/debian\n",               // no suite
		"deb [arch=amd64 http://x.example bookworm\n", // options never closed
	} {
		if _, err := parseOneLineSources(strings.NewReader(bad)); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("one-line %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, bad := range []string{
		" continuation first\n",
		"Types deb\n",
	} {
		if _, err := parseDeb822Sources(strings.NewReader(bad)); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("deb822 %q: %v, want ErrInvalid", bad, err)
		}
	}
	got, err := parseOneLineSources(strings.NewReader("deb [arch=amd64]http://x.example/debian bookworm main\n"))
	if err != nil || len(got) != 1 || got[0].URIs[0] != "http://x.example/debian" {
		t.Fatalf("options glued to the URI: %+v %v", got, err)
	}
}

func TestHostCodename(t *testing.T) {
	got, err := hostCodename("testdata/os-release")
	if err != nil || got != "bookworm" {
		t.Fatalf("codename %q, %v", got, err)
	}
	if _, err := hostCodename("testdata/dpkg-status"); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("file without VERSION_CODENAME: %v", err)
	}
}
