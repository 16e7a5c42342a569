package image

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseDpkgStatus(t *testing.T) {
	f, err := os.Open("testdata/dpkg-status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := parseDpkgStatus(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{{"apt", "2.6.1"}, {"bash", "5.2.15-2+b2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestNPMPackages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node_modules")
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pptxgenjs/package.json", `{"name": "pptxgenjs", "version": "4.0.1"}`)
	write("pptxgenjs/node_modules/jszip/package.json", `{"name": "jszip", "version": "3.10.1"}`)
	write("pptxgenjs/node_modules/@types/node/package.json", `{"name": "@types/node", "version": "22.9.0"}`)
	// Files named package.json inside a package are not packages.
	write("pptxgenjs/dist/package.json", `{"name": "not-a-package", "version": "0"}`)
	write("pptxgenjs/node_modules/jszip/lib/package.json", `{"name": "nor-this", "version": "0"}`)
	got, err := npmPackages(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{{"@types/node", "22.9.0"}, {"jszip", "3.10.1"}, {"pptxgenjs", "4.0.1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	none, err := npmPackages(filepath.Join(dir, "absent"))
	if err != nil || len(none) != 0 {
		t.Fatalf("absent folder: %v %v", none, err)
	}
}
