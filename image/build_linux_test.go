package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// tinyDefinition is the smallest useful image: minbase and Python's
// interpreter, a file, a variable and two checks.
const tinyDefinition = `{
  "description": "integration test image",
  "packages": ["python3-minimal"],
  "files": [{"path": "/etc/airlock-test", "content": "hello\n", "mode": "0640"}],
  "env": {"AIRLOCK_TEST": "1"},
  "checks": ["python3 -c 'import sys; assert sys.version_info >= (3, 9)'", "test \"$(id -u):$(id -g)\" = 1000:1000"]
}`

// sourceKey hashes the package's source files and built-in definitions
// exactly as .ci/lib/image.sh does: the lines "SHA256  NAME" of sha256sum
// over the sorted names, hashed again, first 16 hex digits. extra, when
// given, is hashed in after them.
func sourceKey(t *testing.T, extra string) string {
	t.Helper()
	var names []string
	for _, pattern := range []string{"*.go", "definitions/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m {
			if !strings.HasSuffix(n, "_test.go") {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	var list bytes.Buffer
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&list, "%x  %s\n", sha256.Sum256(data), n)
	}
	list.WriteString(extra)
	sum := sha256.Sum256(list.Bytes())
	return hex.EncodeToString(sum[:])[:16]
}

// cachedStore opens the store a long test builds into: under
// $AIRLOCK_CI_CACHE in the folder prefix+key, so that a change of the
// builder or of the definition builds afresh, or in a temporary folder
// without that variable. With prune, the folders of other keys go.
func cachedStore(t *testing.T, prefix, key string, prune bool) *Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	if cache := os.Getenv("AIRLOCK_CI_CACHE"); cache != "" {
		dir = filepath.Join(cache, prefix+key, "images")
		old, _ := filepath.Glob(filepath.Join(cache, prefix+"*"))
		for _, o := range old {
			if prune && filepath.Base(o) != prefix+key {
				must(t, os.RemoveAll(o))
			}
		}
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// requireBuildHost skips a test that really builds unless this host can.
func requireBuildHost(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: building an image downloads Debian packages and takes minutes")
	}
	testenv.Require(t, "root, to build an image (debootstrap, chroot, namespaces)", testenv.Root())
	for _, tool := range []string{"debootstrap", "chroot", "dpkg"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, tool+" (apt-get install debootstrap)", err)
	}
}

// lockedWriter collects progress lines written from several goroutines.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	hit func(line string)
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hit != nil {
		w.hit(string(p))
	}
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestBuildTinyImage(t *testing.T) {
	requireBuildHost(t)
	def, err := ParseDefinition(strings.NewReader(tinyDefinition))
	if err != nil {
		t.Fatal(err)
	}
	s := cachedStore(t, "test-tiny-", sourceKey(t, tinyDefinition), true)
	img, err := s.Get("tiny")
	if err != nil {
		var progress lockedWriter
		start := time.Now()
		img, err = s.Build(context.Background(), "tiny", def, BuildOptions{Progress: &progress})
		t.Logf("build progress:\n%s", progress.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("built the tiny image in %s", time.Since(start).Round(time.Second))
		if !strings.Contains(progress.String(), "[1/8] preparing") || !strings.Contains(progress.String(), "[8/8] committing") {
			t.Errorf("progress lacks the step lines")
		}
	} else {
		t.Logf("reusing the tiny image cached in %s", s.Dir())
	}
	checkTinyManifest(t, img, def)
	checkTinyRootFS(t, img.RootFS())

	imgs, err := s.List()
	if err != nil || len(imgs) != 1 || imgs[0].Name != "tiny" {
		t.Fatalf("List: %v %v", imgs, err)
	}
	if _, err := s.Build(context.Background(), "tiny", def, BuildOptions{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("second build without Replace: %v, want ErrInvalid", err)
	}
}

func checkTinyManifest(t *testing.T, img *Image, def Definition) {
	t.Helper()
	m := img.Manifest
	codename, err := hostCodename(hostOSRelease)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "tiny" || m.Suite != codename || m.Arch == "" || m.User != "1000:1000" || m.Built.IsZero() {
		t.Errorf("manifest %+v", m)
	}
	if m.Env["AIRLOCK_TEST"] != "1" || m.Env["PATH"] != defaultPath || m.Env["NODE_PATH"] != "" {
		t.Errorf("manifest env %v", m.Env)
	}
	if !reflect.DeepEqual(m.Definition, def) {
		t.Errorf("manifest definition %+v, want %+v", m.Definition, def)
	}
	names := map[string]bool{}
	for _, p := range m.Packages {
		names[p.Name] = p.Version != ""
	}
	if !names["python3-minimal"] || !names["libc6"] || names["apt"] || names["dpkg"] {
		t.Errorf("manifest packages %v", m.Packages)
	}
	sum, err := Sum(context.Background(), img.RootFS())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Digest != m.Digest || sum.SizeBytes != m.SizeBytes || sum.Files != m.Files {
		t.Errorf("root file system %+v does not match its manifest (%s, %d bytes, %d files)", sum, m.Digest, m.SizeBytes, m.Files)
	}
}

func checkTinyRootFS(t *testing.T, root string) {
	t.Helper()
	found, err := scanPrivileges(context.Background(), root, false)
	if err != nil || len(found) > 0 {
		t.Errorf("privileged or special files: %v %v", findingStrings(found), err)
	}
	if err := checkForbidden(root); err != nil {
		t.Error(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("/tmp: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/airlock-test")); err != nil || fi.Mode() != 0o640 {
		t.Errorf("/etc/airlock-test: %v %v", fi, err)
	}
	for _, tc := range []struct {
		argv []string
		want string // "" means the command must fail
	}{
		{[]string{"/usr/bin/python3", "-c", "print(6 * 7)"}, "42\n"},
		{[]string{"/bin/sh", "-c", "id -un; cat /etc/airlock-test 2>&1 || true"}, "sandbox\ncat: /etc/airlock-test: Permission denied\n"},
		{[]string{"/usr/bin/apt-get", "--version"}, ""},
		{[]string{"/usr/bin/dpkg", "--version"}, ""},
		{[]string{"/usr/bin/node", "--version"}, ""},
	} {
		cmd := exec.Command("chroot", append([]string{"--userspec=1000:1000", root}, tc.argv...)...)
		cmd.Env = []string{"PATH=" + defaultPath}
		out, err := cmd.CombinedOutput()
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%v ran in the image: %s", tc.argv, out)
		case tc.want != "" && (err != nil || string(out) != tc.want):
			t.Errorf("%v: %q %v, want %q", tc.argv, out, err, tc.want)
		}
	}
}

func TestBuildInterruptedLeavesNothing(t *testing.T) {
	requireBuildHost(t)
	def, err := ParseDefinition(strings.NewReader(tinyDefinition))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Build(ctx, "tiny", def, BuildOptions{})
		done <- err
	}()
	waitForDebootstrap(t, s.Dir())
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted build: %v, want context.Canceled", err)
	}
	t.Logf("interrupted build said: %v", err)
	if _, err := s.Get("tiny"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after an interrupted build: %v", err)
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != lockFile {
			t.Errorf("left in the store: %s", e.Name())
		}
	}
	checkNothingRuns(t, s.Dir())
}

// TestBuildKilledIsCleanedUp kills a process in the middle of a build with
// SIGKILL, as the OOM killer or a power cut would, and checks that its
// processes and mounts die with it and that the next build's cleaning
// removes its folder.
func TestBuildKilledIsCleanedUp(t *testing.T) {
	requireBuildHost(t)
	s, err := OpenStore(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperBuild$", "-test.v")
	helper.Env = append(os.Environ(), "AIRLOCK_IMAGE_HELPER_STORE="+s.Dir())
	var out lockedWriter
	helper.Stdout, helper.Stderr = &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	waitForDebootstrap(t, s.Dir())
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	checkNothingRuns(t, s.Dir())
	leftovers, err := filepath.Glob(filepath.Join(s.Dir(), buildPrefix+"tiny-*"))
	if err != nil || len(leftovers) != 1 {
		t.Fatalf("a killed build should leave its folder: %v %v\n%s", leftovers, err, out.String())
	}
	var n int
	if err := s.withLock(func() (err error) { n, err = s.cleanLeftovers(); return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftovers[0]); n != 1 || !os.IsNotExist(err) {
		t.Fatalf("cleaning removed %d folders; the leftover: %v", n, err)
	}
}

// TestHelperBuild is the process that TestBuildKilledIsCleanedUp kills.
func TestHelperBuild(t *testing.T) {
	dir := os.Getenv("AIRLOCK_IMAGE_HELPER_STORE")
	if dir == "" {
		t.Skip("runs only as the helper process of TestBuildKilledIsCleanedUp")
	}
	def, err := ParseDefinition(strings.NewReader(tinyDefinition))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Build(context.Background(), "tiny", def, BuildOptions{Progress: os.Stderr})
	t.Fatalf("the helper build was meant to be killed, but it ended: %v", err)
}

// waitForDebootstrap waits until a debootstrap working on the store has
// started writing the root file system.
func waitForDebootstrap(t *testing.T, storeDir string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(storeDir, buildPrefix+"*", rootfsDir, "debootstrap"))
		if len(m) > 0 && len(processesUsing(storeDir)) > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("debootstrap never started")
}

// checkNothingRuns waits for the processes working on dir to die (they are
// killed, but the kernel reaps them asynchronously) and then checks that
// none is left and that nothing is mounted under dir.
func checkNothingRuns(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(processesUsing(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := processesUsing(dir); len(left) > 0 {
		t.Errorf("processes left working on %s: %v", dir, left)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			t.Errorf("mount left under the store: %s", line)
		}
	}
}

// processesUsing lists the processes whose command line names dir.
func processesUsing(dir string) []string {
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, p := range pids {
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(dir)) && !bytes.Contains(data, []byte("-test.run=^TestHelperBuild$")) {
			found = append(found, strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return found
}

func TestCommitRenamesIntoPlace(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putImage(t, s, "demo", 1)
	newBuild := func(replace bool) *build {
		b := &build{store: s, name: "demo", opts: BuildOptions{Replace: replace}, start: time.Now(),
			suite: "bookworm", arch: "amd64", prog: newProgress(nil, time.Now())}
		must(t, s.withLock(func() (err error) { b.work, err = s.newScratch(buildPrefix, "demo"); return err }))
		b.root = filepath.Join(b.work.dir, rootfsDir)
		must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
		must(t, os.WriteFile(filepath.Join(b.root, "etc", "new"), nil, 0o644))
		return b
	}
	b := newBuild(false)
	if err := b.commit(context.Background()); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("commit over an image that appeared meanwhile: %v", err)
	}
	must(t, b.work.remove())

	b = newBuild(true)
	must(t, b.commit(context.Background()))
	if b.work != nil {
		t.Error("commit left the scratch folder in the build")
	}
	img, err := s.Get("demo")
	if err != nil {
		t.Fatal(err)
	}
	if img.Manifest.Suite != "bookworm" || img.Manifest.User != "1000:1000" || img.Manifest.Env["PATH"] != defaultPath {
		t.Errorf("manifest %+v", img.Manifest)
	}
	if _, err := os.Stat(filepath.Join(img.RootFS(), "etc", "new")); err != nil {
		t.Errorf("the new root file system is not in place: %v", err)
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{lockFile, "demo"}) {
		t.Errorf("store holds %v after a replacing commit", names)
	}
}
