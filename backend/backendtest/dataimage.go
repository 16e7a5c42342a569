//go:build linux

package backendtest

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The data-work round trip the image exists for: openpyxl writes a
// spreadsheet, pandas reads it from /workspace/input of a second sandbox
// and matplotlib draws a PNG, node's pptxgenjs builds a presentation; the
// files go through the artifact filter and are checked on the host.
const (
	makeXLSX = `
import openpyxl
wb = openpyxl.Workbook()
ws = wb.active
ws.append(["region", "amount"])
for r, a in [("north", 3), ("south", 5), ("north", 4)]:
    ws.append([r, a])
wb.save("/workspace/output/sales.xlsx")
print("written")
`
	analyse = `
import pandas as pd, matplotlib
import matplotlib.pyplot as plt
df = pd.read_excel("/workspace/input/sales.xlsx")
totals = df.groupby("region")["amount"].sum()
print(totals.to_dict())
ax = totals.plot.bar(title="Sales by region")
ax.figure.set_size_inches(4, 3)
ax.figure.savefig("/workspace/output/chart.png", dpi=100)
`
	makePPTX = `
const pptxgen = require("pptxgenjs");
const pres = new pptxgen();
pres.addSlide().addText("Quarterly airlock report", { x: 1, y: 1, w: 8, h: 1 });
pres.writeFile({ fileName: "/workspace/output/deck.pptx" }).then(() => console.log("deck written"));
`
)

func (s *suite) testDataImage(t *testing.T) {
	if s.DataImage.Name == "" {
		testenv.Require(t, "the data image", fmt.Errorf("backend %s: none configured (Config.DataImage)", s.Backend.Name()))
	}
	create := func() sandbox.Instance {
		t.Helper()
		s.checkLeftoversAtEnd(t)
		return CreateWithin(t, s.createTimeout(), s.Backend, s.DataImage, Policy(t, func(p *sandbox.Policy) {
			p.Limits.MemoryBytes = 1 << 30
			p.Limits.Timeout = sandbox.Duration(120e9)
		}))
	}
	out := t.TempDir()
	first := create()
	res := Exec(t, first, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", makeXLSX}})
	if res.Stdout != "written\n" {
		t.Fatalf("openpyxl: %q %q", res.Stdout, res.Stderr)
	}
	res = Exec(t, first, sandbox.ProcessSpec{Cmd: []string{"node", "-e", makePPTX}})
	if res.Stdout != "deck written\n" {
		t.Fatalf("pptxgenjs: %q %q", res.Stdout, res.Stderr)
	}
	collect(t, first, out, map[string]string{"sales.xlsx": sandbox.VerdictAccepted, "deck.pptx": sandbox.VerdictAccepted})

	second := create()
	f, err := os.Open(filepath.Join(out, "sales.xlsx"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := putInput(context.Background(), second, "sales.xlsx", f); err != nil {
		t.Fatal(err)
	}
	res = Exec(t, second, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", analyse}})
	if res.Stdout != "{'north': 7, 'south': 5}\n" {
		t.Fatalf("pandas and matplotlib: %q %q", res.Stdout, res.Stderr)
	}
	collect(t, second, out, map[string]string{"chart.png": sandbox.VerdictAccepted})

	b, err := os.ReadFile(filepath.Join(out, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 400 || img.Bounds().Dy() != 300 {
		t.Errorf("chart.png: %v, bounds %v", err, img.Bounds())
	}
	deck, err := zip.OpenReader(filepath.Join(out, "deck.pptx"))
	if err != nil {
		t.Fatal(err)
	}
	defer deck.Close()
	found := false
	for _, zf := range deck.File {
		if strings.HasPrefix(zf.Name, "ppt/slides/slide") {
			r, _ := zf.Open()
			body, _ := io.ReadAll(r)
			r.Close()
			found = found || strings.Contains(string(body), "Quarterly airlock report")
		}
	}
	if !found {
		t.Errorf("deck.pptx has no slide with the text")
	}
	t.Logf("xlsx %s, png %dx%d, pptx with its slide: all through the artifact filter", filepath.Join(out, "sales.xlsx"), img.Bounds().Dx(), img.Bounds().Dy())
}

// collect runs the artifact filter into dst and checks the verdicts.
func collect(t *testing.T, inst sandbox.Instance, dst string, want map[string]string) {
	t.Helper()
	arts, err := collectOutput(context.Background(), inst, dst, artifact.Normalize(sandbox.ArtifactPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sandbox.Artifact{}
	for _, a := range arts {
		got[a.Path] = a
	}
	for p, v := range want {
		if got[p].Verdict != v {
			t.Errorf("artifact %s: %+v, want %s", p, got[p], v)
		}
	}
}
