package image

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// pythonBuildBudget is the least time left before the test deadline for
// the python image to be built rather than skipped.
const pythonBuildBudget = 20 * time.Minute

// TestPythonImage builds the built-in python image (or reuses the one that
// .ci/lib/image.sh cached under $AIRLOCK_CI_CACHE for the same sources) and
// does data work in it under bubblewrap, as the sandbox user, with the
// root read-only and only /workspace/output writable: pandas, a matplotlib
// chart, an Excel file with openpyxl and a PowerPoint file with pptxgenjs.
func TestPythonImage(t *testing.T) {
	requireBuildHost(t)
	bwrap, err := exec.LookPath("bwrap")
	testenv.Require(t, "bwrap (apt-get install bubblewrap)", err)
	img := pythonImage(t)
	m := img.Manifest
	t.Logf("python image: %s, %d files, %d Debian and %d npm packages, built in %.0fs",
		FormatSize(m.SizeBytes), m.Files, len(m.Packages), len(m.NPMPackages), m.BuildSeconds)
	if m.Env["NODE_PATH"] != npmModules || m.Env["MPLBACKEND"] != "Agg" {
		t.Errorf("manifest env %v", m.Env)
	}
	if !hasNPM(m.NPMPackages, "pptxgenjs") {
		t.Errorf("npm packages %v lack pptxgenjs", m.NPMPackages)
	}
	if err := checkForbidden(img.RootFS()); err != nil {
		t.Error(err)
	}
	out := t.TempDir()
	must(t, os.Chmod(out, 0o777))
	run := func(argv ...string) string {
		t.Helper()
		args := []string{"--ro-bind", img.RootFS(), "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
			"--bind", out, "/workspace/output", "--unshare-all", "--die-with-parent",
			"--uid", "1000", "--gid", "1000", "--chdir", "/workspace", "--clearenv"}
		for k, v := range m.Env {
			args = append(args, "--setenv", k, v)
		}
		cmd := exec.Command(bwrap, append(append(args, "--"), argv...)...)
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, got)
		}
		return string(got)
	}

	if got := run("python3", "-c", `import pandas as pd
df = pd.DataFrame({"city": ["a", "b", "a"], "sales": [1.5, 2.0, 3.5]})
print(df.groupby("city")["sales"].sum().to_dict())`); got != "{'a': 5.0, 'b': 2.0}\n" {
		t.Errorf("pandas: %q", got)
	}

	run("python3", "-c", `import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
ax.bar(["q1", "q2"], [3, 5]); ax.set_title("Sales")
fig.savefig("/workspace/output/chart.png")`)
	checkPNG(t, filepath.Join(out, "chart.png"), 400, 300)
	if got := run("python3", "-c", `import matplotlib.font_manager as fm; print(fm.findfont("DejaVu Sans", fallback_to_default=False))`); !strings.Contains(got, "DejaVuSans.ttf") {
		t.Errorf("matplotlib finds no DejaVu font: %q", got)
	}

	if got := run("python3", "-c", `import openpyxl
wb = openpyxl.Workbook(); ws = wb.active; ws.title = "Data"
ws.append(["item", "qty"]); ws.append(["pens", 12]); ws["C2"] = "=B2*2"
wb.save("/workspace/output/table.xlsx")
back = openpyxl.load_workbook("/workspace/output/table.xlsx")
print(back["Data"]["B2"].value, back["Data"]["C2"].value)`); got != "12 =B2*2\n" {
		t.Errorf("openpyxl round trip: %q", got)
	}
	checkZip(t, filepath.Join(out, "table.xlsx"), "pens", "xl/workbook.xml", "xl/worksheets/sheet1.xml")

	if got := run("node", "-e", `const PptxGenJS = require("pptxgenjs");
const pres = new PptxGenJS();
pres.addSlide().addText("Quarterly report", { x: 1, y: 1, fontSize: 24 });
pres.writeFile({ fileName: "/workspace/output/deck.pptx" }).then((f) => console.log("wrote " + f));`); got != "wrote /workspace/output/deck.pptx\n" {
		t.Errorf("pptxgenjs: %q", got)
	}
	checkZip(t, filepath.Join(out, "deck.pptx"), "Quarterly report", "ppt/presentation.xml", "ppt/slides/slide1.xml")

	if got := run("/bin/sh", "-c", "for c in gcc cc g++ apt-get dpkg npm pip3; do command -v $c; done; python3 -m pip --version 2>&1 | tail -1; echo end"); got != "/usr/bin/python3: No module named pip\nend\n" {
		t.Errorf("package managers or compilers reachable: %q", got)
	}
}

// pythonImage returns the python image from the cache keyed like
// .ci/lib/image.sh, building it there (or in a temporary store) if needed.
func pythonImage(t *testing.T) *Image {
	t.Helper()
	// .ci/lib/image.sh owns the home- folders and prunes them itself.
	s := cachedStore(t, "home-", sourceKey(t, ""), false)
	if img, err := s.Get("python"); err == nil {
		t.Logf("reusing the python image cached in %s", s.Dir())
		return img
	}
	if d, ok := t.Deadline(); ok && time.Until(d) < pythonBuildBudget {
		testenv.Require(t, "the python image built (bash .ci/lib/image.sh), or time to build it",
			fmt.Errorf("building it takes up to %s; run with -timeout 30m or more", pythonBuildBudget))
	}
	def, err := Builtin("python")
	if err != nil {
		t.Fatal(err)
	}
	var progress lockedWriter
	img, err := s.Build(context.Background(), "python", def, BuildOptions{Progress: &progress})
	t.Logf("build progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func hasNPM(pkgs []Package, name string) bool {
	for _, p := range pkgs {
		if p.Name == name {
			return true
		}
	}
	return false
}

func checkPNG(t *testing.T, file string, w, h int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != w || cfg.Height != h {
		t.Errorf("%s: %dx%d %v, want a %dx%d PNG", filepath.Base(file), cfg.Width, cfg.Height, err, w, h)
	}
}

// checkZip checks that an OOXML file holds the named parts and that one of
// its parts contains text.
func checkZip(t *testing.T, file, text string, parts ...string) {
	t.Helper()
	z, err := zip.OpenReader(file)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(file), err)
	}
	defer z.Close()
	names := map[string]*zip.File{}
	for _, f := range z.File {
		names[f.Name] = f
	}
	for _, p := range parts {
		if names[p] == nil {
			keys := make([]string, 0, len(names))
			for k := range names {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Errorf("%s has no %s; it has %v", filepath.Base(file), p, keys)
			return
		}
	}
	found := false
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		found = found || bytes.Contains(data, []byte(text))
	}
	if !found {
		t.Errorf("%s does not contain %q", filepath.Base(file), text)
	}
}
