package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/image"
)

// imageCLI runs "airlock image ARGS" in-process with AIRLOCK_HOME at home.
func imageCLI(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == "AIRLOCK_HOME" {
				return home
			}
			return ""
		}}
	code := dispatch(context.Background(), env, append([]string{"image"}, args...))
	return out.String(), errb.String(), code
}

// putTestImage writes an image folder as a finished build leaves it.
func putTestImage(t *testing.T, home, name string) {
	t.Helper()
	dir := filepath.Join(home, "images", name)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := image.Manifest{Name: name, Built: time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC), SizeBytes: 100 << 20,
		Digest: "sha256:0123456789abcdef", Packages: []image.Package{{Name: "bash", Version: "5.2"}}}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImageListAndRemove(t *testing.T) {
	home := t.TempDir()
	if out, errs, code := imageCLI(t, home, "ls"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("ls of an empty store: %q %q %d", out, errs, code)
	}
	putTestImage(t, home, "demo")
	out, errs, code := imageCLI(t, home, "ls")
	if code != 0 || !strings.Contains(out, "demo") || !strings.Contains(out, "100.0 MiB") ||
		!strings.Contains(out, "2026-05-01 12:30") || !strings.Contains(out, "sha256:0123456789ab\n") {
		t.Fatalf("ls: %q %q %d", out, errs, code)
	}
	out, _, code = imageCLI(t, home, "ls", "--json")
	var imgs []image.Image
	if err := json.Unmarshal([]byte(out), &imgs); err != nil || code != 0 || len(imgs) != 1 ||
		imgs[0].Name != "demo" || imgs[0].Dir != filepath.Join(home, "images", "demo") || imgs[0].Manifest.Packages[0].Name != "bash" {
		t.Fatalf("ls --json: %q %v %d", out, err, code)
	}
	if _, errs, code := imageCLI(t, home, "rm", "demo"); code != 0 {
		t.Fatalf("rm: %q %d", errs, code)
	}
	if out, _, _ := imageCLI(t, home, "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls --json after rm: %q", out)
	}
	if _, errs, code := imageCLI(t, home, "rm", "demo"); code != 125 || !strings.Contains(errs, "not found") {
		t.Fatalf("rm of a missing image: %q %d", errs, code)
	}
}

func TestImageUsageErrors(t *testing.T) {
	home := t.TempDir()
	bad := filepath.Join(home, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"packages": ["python3"], "compiler": "gcc"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage:"},
		{[]string{"help"}, 0, ""},
		{[]string{"build", "-h"}, 0, ""},
		{[]string{"frobnicate"}, 2, "unknown subcommand"},
		{[]string{"build"}, 2, "exactly one image NAME"},
		{[]string{"build", "a", "b"}, 2, "exactly one image NAME"},
		{[]string{"build", "--nope", "python"}, 2, "flag provided but not defined"},
		{[]string{"build", "Bad/Name", "--file", bad}, 2, "unknown field"},
		{[]string{"build", "mine", "--file", bad}, 2, `unknown field "compiler"`},
		{[]string{"build", "mine", "--file", filepath.Join(home, "absent.json")}, 125, "no such file"},
		{[]string{"build", "nope"}, 125, "no built-in image definition"},
		{[]string{"ls", "extra"}, 2, "takes no arguments"},
		{[]string{"rm"}, 2, "exactly one image NAME"},
		{[]string{"rm", "../etc"}, 2, "image name"},
	} {
		_, errs, code := imageCLI(t, home, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) {
			t.Errorf("image %v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, errs, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "images")); !os.IsNotExist(err) {
		t.Errorf("failed commands created the store: %v", err)
	}
}
