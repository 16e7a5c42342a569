package image

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// vfsCapV2 is a version 2 security.capability value granting
// CAP_NET_RAW (bit 13), permitted and effective.
var vfsCapV2 = []byte{
	0x01, 0x00, 0x00, 0x02, // magic 0x02000000 | VFS_CAP_FLAGS_EFFECTIVE
	0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, // permitted, inheritable (low word)
	0, 0, 0, 0, 0, 0, 0, 0, // permitted, inheritable (high word)
}

func TestScanPrivilegesFindsAndStrips(t *testing.T) {
	testenv.Require(t, "root, for setgid files of other groups, device nodes and file capabilities", testenv.Root())
	ctx := context.Background()
	root := t.TempDir()
	p := func(rel string) string { return filepath.Join(root, rel) }
	must(t, os.MkdirAll(p("usr/bin"), 0o755))
	for _, f := range []string{"usr/bin/su", "usr/bin/wall", "usr/bin/ping", "usr/bin/plain"} {
		must(t, os.WriteFile(p(f), []byte("#!/bin/sh\n"), 0o755))
	}
	must(t, os.Chmod(p("usr/bin/su"), 0o755|os.ModeSetuid))
	must(t, os.Chown(p("usr/bin/wall"), 0, 5))
	must(t, os.Chmod(p("usr/bin/wall"), 0o755|os.ModeSetgid))
	must(t, unix.Lsetxattr(p("usr/bin/ping"), capabilityXattr, vfsCapV2, 0))
	must(t, os.Mkdir(p("shared"), 0o775|os.ModeSetgid))
	must(t, os.Chmod(p("shared"), 0o775|os.ModeSetgid))
	must(t, unix.Mkfifo(p("fifo"), 0o644))
	must(t, unix.Mknod(p("mem"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))))
	must(t, os.Symlink("/usr/bin/su", p("link-to-su")))

	found, err := scanPrivileges(ctx, root, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/fifo (fifo)", "/mem (device)", "/shared (setgid)",
		"/usr/bin/ping (capabilities)", "/usr/bin/su (setuid)", "/usr/bin/wall (setgid)",
	}
	if got := findingStrings(found); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("found %v, want %v", got, want)
	}
	if err := privilegeError(found); err == nil || !strings.Contains(err.Error(), "/usr/bin/su (setuid)") {
		t.Fatalf("a tree with a setuid file passed verification: %v", err)
	}

	fixed, err := scanPrivileges(ctx, root, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(fixed) != len(want) {
		t.Fatalf("fixed %v, want %v", findingStrings(fixed), want)
	}
	left, err := scanPrivileges(ctx, root, false)
	if err != nil || privilegeError(left) != nil {
		t.Fatalf("after stripping: %v %v", findingStrings(left), err)
	}
	for f, mode := range map[string]os.FileMode{"usr/bin/su": 0o755, "usr/bin/wall": 0o755, "shared": 0o775 | os.ModeDir} {
		fi, err := os.Lstat(p(f))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v (%v), want %v", f, fi.Mode(), err, mode)
		}
	}
	if _, err := unix.Lgetxattr(p("usr/bin/ping"), capabilityXattr, nil); err != unix.ENODATA {
		t.Errorf("ping still has capabilities: %v", err)
	}
	for _, gone := range []string{"fifo", "mem"} {
		if _, err := os.Lstat(p(gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived stripping: %v", gone, err)
		}
	}
	if fi, err := os.Lstat(p("usr/bin/plain")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("an ordinary file changed: %v %v", fi.Mode(), err)
	}
}

func findingStrings(fs []privilegeFinding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.String()
	}
	sort.Strings(out)
	return out
}
