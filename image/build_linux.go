package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Host files a build reads, and what it puts into every image.
const (
	hostAptDir    = "/etc/apt"
	hostOSRelease = "/etc/os-release"
	sandboxUser   = "sandbox"
	sandboxID     = "1000"
	tickInterval  = 20 * time.Second
)

// buildEnv is the whole environment of debootstrap and of the commands run
// in the chroot: nothing of the caller's environment leaks into the image.
var buildEnv = []string{
	"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C",
	"DEBIAN_FRONTEND=noninteractive",
	"HOME=/root",
}

// What must be absent from every image: package managers and compilers,
// each tool looked for in every folder of binDirs, and pip's module.
var (
	binDirs        = []string{"usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"}
	forbiddenTools = []string{
		"apt", "apt-get", "apt-cache", "aptitude", "dpkg", "dpkg-deb", "npm", "npx",
		"pip", "pip3", "pipx", "easy_install",
		"cc", "c++", "gcc", "g++", "cpp", "clang", "tcc", "gfortran", "as", "ld",
	}
	forbiddenModules = []string{"usr/lib/python3/dist-packages/pip"}
)

// chrootWrapper runs a command inside the root file system with /proc, a
// minimal /dev and a fresh /tmp. With a user ("UID:GID") the root is made
// read-only first, as in a sandbox. It runs as PID 1 of new mount and PID
// namespaces, so its mounts and processes vanish with it however it ends,
// even on SIGKILL. Arguments: ROOT USER COMMAND [ARG...].
const chrootWrapper = `set -e
root=$1; user=$2; shift 2
if [ -n "$user" ]; then
	mount --bind "$root" "$root"
	mount -o remount,bind,ro "$root"
fi
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,noexec,mode=0755,size=8m tmpfs "$root/dev"
for n in null zero full random urandom tty; do
	[ -e "/dev/$n" ] || continue
	: > "$root/dev/$n"
	mount --bind "/dev/$n" "$root/dev/$n"
done
ln -s /proc/self/fd "$root/dev/fd"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$root/tmp"
exec chroot ${user:+--userspec="$user"} "$root" "$@"
`

// policyRC keeps packages from starting services during the build.
const policyRC = "#!/bin/sh\nexit 101\n"

// Build builds an image from def and stores it as name. It needs root,
// debootstrap, and npm when def has npm packages. It works in a locked
// scratch folder of the store and renames it into place only when the
// image is complete and verified, so an interrupted build (ctx cancelled,
// SIGINT, even SIGKILL) never leaves an image that looks complete; the
// scratch folders of killed builds are removed by the next build.
func (s *Store) Build(ctx context.Context, name string, def Definition, opts BuildOptions) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := def.Validate(); err != nil {
		return nil, err
	}
	if !opts.Replace {
		if _, err := s.Get(name); err == nil {
			return nil, fmt.Errorf("image %q already exists; replace or remove it: %w", name, sandbox.ErrInvalid)
		}
	}
	b, err := newBuild(ctx, s, name, def, opts)
	if err != nil {
		return nil, fmt.Errorf("build image %q: %w", name, err)
	}
	return b.run(ctx)
}

// build is the state of one image build.
type build struct {
	store *Store
	name  string
	def   Definition
	opts  BuildOptions
	start time.Time
	prog  *progress
	suite string
	arch  string
	apt   aptPlan
	work  *scratch // nil once committed
	root  string
	man   Manifest
}

func newBuild(ctx context.Context, s *Store, name string, def Definition, opts BuildOptions) (*build, error) {
	if err := checkBuildHost(def); err != nil {
		return nil, err
	}
	suite, plan, err := resolveSources(def.Suite, opts.Mirror)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "dpkg", "--print-architecture").Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg --print-architecture: %w", err)
	}
	start := time.Now()
	return &build{store: s, name: name, def: def, opts: opts, start: start, prog: newProgress(opts.Progress, start),
		suite: suite, arch: strings.TrimSpace(string(out)), apt: plan}, nil
}

// checkBuildHost fails unless this process can build def here.
func checkBuildHost(def Definition) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("debootstrap and chroot need root: %w", sandbox.ErrUnsupported)
	}
	tools := []string{"debootstrap", "chroot", "mount", "dpkg"}
	if len(def.NPM) > 0 {
		tools = append(tools, "npm")
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install debootstrap npm): %w", t, sandbox.ErrUnsupported)
		}
	}
	return nil
}

// resolveSources picks the suite (the host's release unless one is named)
// and where its packages come from (the host's apt sources unless a mirror
// is named).
func resolveSources(suite, mirror string) (string, aptPlan, error) {
	hostSuite, err := hostCodename(hostOSRelease)
	if err != nil && (suite == "" || mirror == "") {
		return "", aptPlan{}, err
	}
	if suite == "" {
		suite = hostSuite
	}
	srcs, err := readHostApt(hostAptDir)
	if err != nil && mirror == "" {
		return "", aptPlan{}, err
	}
	plan, err := srcs.plan(hostSuite, suite, mirror)
	return suite, plan, err
}

// step is one stage of a build.
type step struct {
	title string
	run   func(ctx context.Context) error
}

func (b *build) steps() []step {
	steps := []step{
		{"preparing the build folder", b.prepare},
		{fmt.Sprintf("bootstrapping Debian %s (minbase, %s) from %s", b.suite, b.arch, b.apt.Mirror), b.bootstrap},
		{fmt.Sprintf("updating the base and installing Debian packages (%d named)", len(b.def.Packages)), b.installPackages},
	}
	if len(b.def.Remove) > 0 {
		steps = append(steps, step{fmt.Sprintf("purging build-only Debian packages (%d named)", len(b.def.Remove)), b.purgePackages})
	}
	if len(b.def.NPM) > 0 {
		steps = append(steps, step{fmt.Sprintf("installing npm packages under %s (%d named)", npmPrefix, len(b.def.NPM)), b.installNPM})
	}
	return append(steps,
		step{"adding files, the sandbox user and the empty folders", b.addFiles},
		step{"recording package versions and removing apt, dpkg and their caches", b.removePackageManagers},
		step{"stripping setuid/setgid bits, file capabilities and special files", b.strip},
		step{"verifying, running the checks and computing the content digest", b.verify},
		step{"committing the image", b.commit},
	)
}

func (b *build) run(ctx context.Context) (*Image, error) {
	defer func() {
		if b.work != nil {
			b.work.remove()
		}
	}()
	steps := b.steps()
	for i, st := range steps {
		b.prog.begin(i+1, len(steps), st.title)
		err := st.run(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("build image %q interrupted while %s: %w", b.name, st.title, ctx.Err())
		}
		if err != nil {
			return nil, fmt.Errorf("build image %q: %s: %w", b.name, st.title, err)
		}
	}
	img := &Image{Name: b.name, Dir: filepath.Join(b.store.dir, b.name), Manifest: b.man}
	b.prog.note("built %s: %s, %d Debian and %d npm packages, %s, in %s", b.name,
		FormatSize(b.man.SizeBytes), len(b.man.Packages), len(b.man.NPMPackages), b.man.Digest, b.prog.elapsed())
	return img, nil
}

func (b *build) prepare(context.Context) error {
	if err := os.MkdirAll(b.store.dir, 0o755); err != nil {
		return err
	}
	return b.store.withLock(func() error {
		n, err := b.store.cleanLeftovers()
		if err != nil {
			return err
		}
		if n > 0 {
			b.prog.note("leftover folders of interrupted builds removed: %d", n)
		}
		if b.work, err = b.store.newScratch(buildPrefix, b.name); err != nil {
			return err
		}
		b.root = filepath.Join(b.work.dir, rootfsDir)
		return os.Chmod(b.work.dir, 0o755)
	})
}

func (b *build) bootstrap(ctx context.Context) error {
	err := b.command(ctx, buildEnv, "debootstrap", "--variant=minbase", "--arch="+b.arch, b.suite, b.root, b.apt.Mirror)
	if err != nil {
		return err
	}
	return b.notePackageCount()
}

func (b *build) installPackages(ctx context.Context) error {
	r, err := os.OpenRoot(b.root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := replaceFile(r, "etc/apt/sources.list", []byte(strings.Join(b.apt.Lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := replaceFile(r, "usr/sbin/policy-rc.d", []byte(policyRC), 0o755); err != nil {
		return err
	}
	const script = `apt-get update -q -o Acquire::Retries=3
apt-get upgrade -y -q -o Dpkg::Use-Pty=0
[ $# -eq 0 ] || apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "$@"`
	if err := b.chroot(ctx, script, b.def.Packages...); err != nil {
		return err
	}
	return b.notePackageCount()
}

func (b *build) purgePackages(ctx context.Context) error {
	if err := b.chroot(ctx, `dpkg --purge --force-depends "$@"`, b.def.Remove...); err != nil {
		return err
	}
	return b.notePackageCount()
}

func (b *build) installNPM(ctx context.Context) error {
	args := append([]string{"install", "--global", "--prefix", filepath.Join(b.root, npmPrefix),
		"--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev", "--loglevel=warn"},
		b.def.NPM...)
	// npm keeps the caller's environment: it holds npm's own configuration.
	if err := b.command(ctx, os.Environ(), "npm", args...); err != nil {
		return err
	}
	pkgs, err := npmPackages(filepath.Join(b.root, npmModules))
	if err != nil {
		return err
	}
	b.man.NPMPackages = pkgs
	b.prog.note("npm packages installed: %d", len(pkgs))
	return nil
}

func (b *build) addFiles(context.Context) error {
	r, err := os.OpenRoot(b.root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, f := range b.def.Files {
		if err := addFile(r, f); err != nil {
			return err
		}
	}
	if err := addSandboxUser(r); err != nil {
		return err
	}
	for _, dir := range emptyDirs {
		if err := emptyDir(r, dir[1:]); err != nil {
			return err
		}
	}
	if err := r.Chmod("tmp", os.ModeSticky|0o777); err != nil {
		return err
	}
	if err := replaceFile(r, "etc/resolv.conf", nil, 0o644); err != nil {
		return err
	}
	if err := replaceFile(r, "etc/hostname", []byte("airlock\n"), 0o644); err != nil {
		return err
	}
	return removeIfPresent(r, "usr/sbin/policy-rc.d")
}

func addFile(r *os.Root, f File) error {
	data := []byte{}
	if f.Content != nil {
		data = []byte(*f.Content)
	} else {
		var err error
		if data, err = os.ReadFile(f.Source); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	perm, err := f.perm()
	if err != nil {
		return err
	}
	rel := f.Path[1:]
	if err := r.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}
	return replaceFile(r, rel, data, perm)
}

// replaceFile writes a file inside the root, replacing whatever was at
// that path (a link is replaced, never followed), with exactly perm.
func replaceFile(r *os.Root, rel string, data []byte, perm os.FileMode) error {
	if err := removeIfPresent(r, rel); err != nil {
		return err
	}
	if err := r.WriteFile(rel, data, perm); err != nil {
		return err
	}
	return r.Chmod(rel, perm)
}

func removeIfPresent(r *os.Root, rel string) error {
	if err := r.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// emptyDir makes rel an empty folder owned by root, mode 0755.
func emptyDir(r *os.Root, rel string) error {
	if err := r.RemoveAll(rel); err != nil {
		return err
	}
	if err := r.Mkdir(rel, 0o755); err != nil {
		return err
	}
	return r.Chmod(rel, 0o755)
}

// addSandboxUser adds the sandbox user and group, 1000:1000 with home
// /tmp, unless they are there already. Another account with that id is an
// error.
func addSandboxUser(r *os.Root) error {
	if err := addAccount(r, "etc/passwd", sandboxUser+":x:"+sandboxID+":"+sandboxID+":airlock sandbox:/tmp:/bin/sh"); err != nil {
		return err
	}
	return addAccount(r, "etc/group", sandboxUser+":x:"+sandboxID+":")
}

// addAccount appends entry to a passwd or group file unless an entry of
// that name exists; an entry of another name with the same id is an error.
func addAccount(r *os.Root, rel, entry string) error {
	data, err := r.ReadFile(rel)
	if err != nil {
		return err
	}
	want := strings.Split(entry, ":")
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if f[0] == want[0] {
			if f[2] != want[2] {
				return fmt.Errorf("/%s: %s has id %s, want %s", rel, f[0], f[2], want[2])
			}
			return nil
		}
		if f[2] == want[2] {
			return fmt.Errorf("/%s: id %s belongs to %s, not %s", rel, f[2], f[0], want[0])
		}
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	return replaceFile(r, rel, append(data, entry+"\n"...), 0o644)
}

// removePackageManagers records the Debian packages (apt and dpkg left
// out) and then deletes the files of apt and dpkg, the package database,
// the caches and the logs.
func (b *build) removePackageManagers(context.Context) error {
	r, err := os.OpenRoot(b.root)
	if err != nil {
		return err
	}
	defer r.Close()
	status, err := r.ReadFile("var/lib/dpkg/status")
	if err != nil {
		return err
	}
	pkgs, err := parseDpkgStatus(bytes.NewReader(status))
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		if p.Name != "apt" && p.Name != "dpkg" {
			b.man.Packages = append(b.man.Packages, p)
		}
	}
	for _, pkg := range []string{"apt", "dpkg"} {
		if err := removePackageFiles(r, pkg); err != nil {
			return err
		}
	}
	// ldconfig's aux-cache holds inode numbers and times: without it, two
	// builds of the same packages get the same digest.
	for _, p := range []string{"var/lib/dpkg", "var/lib/apt", "var/cache/apt", "etc/apt/sources.list", "var/cache/ldconfig/aux-cache"} {
		if err := r.RemoveAll(p); err != nil {
			return err
		}
	}
	return emptyDir(r, "var/log")
}

// removePackageFiles deletes the files that dpkg lists for pkg. A listed
// path that is the parent of another is a folder (or a link to one, such
// as /lib on a merged /usr) and stays.
func removePackageFiles(r *os.Root, pkg string) error {
	list, err := r.ReadFile("var/lib/dpkg/info/" + pkg + ".list")
	if err != nil {
		return err
	}
	paths := strings.Split(strings.TrimSpace(string(list)), "\n")
	parents := map[string]bool{}
	for _, p := range paths {
		parents[path.Dir(p)] = true
	}
	for _, p := range paths {
		rel := strings.TrimPrefix(p, "/")
		if parents[p] || rel == "" || rel == "." {
			continue
		}
		fi, err := r.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
			continue
		}
		if err != nil {
			return err
		}
		if err := r.Remove(rel); err != nil {
			return err
		}
	}
	return nil
}

func (b *build) strip(ctx context.Context) error {
	fixed, err := scanPrivileges(ctx, b.root, true)
	if err != nil {
		return err
	}
	if len(fixed) > 0 {
		b.prog.note("files fixed: %d, such as %s", len(fixed), fixed[0])
	}
	return nil
}

func (b *build) verify(ctx context.Context) error {
	left, err := scanPrivileges(ctx, b.root, false)
	if err != nil {
		return err
	}
	if err := privilegeError(left); err != nil {
		return err
	}
	if err := checkForbidden(b.root); err != nil {
		return err
	}
	if err := b.runChecks(ctx); err != nil {
		return err
	}
	sum, err := Sum(ctx, b.root)
	if err != nil {
		return err
	}
	b.man.Digest, b.man.SizeBytes, b.man.Files = sum.Digest, sum.SizeBytes, sum.Files
	b.prog.note("%s in %d files, %s", FormatSize(sum.SizeBytes), sum.Files, sum.Digest)
	return nil
}

// runChecks runs a shell and then each of the definition's checks inside
// the finished image, read-only, as the sandbox user with the image's
// environment and /tmp as the working folder.
func (b *build) runChecks(ctx context.Context) error {
	argv := []string{"/usr/bin/env", "-i"}
	for k, v := range b.def.Environment() {
		argv = append(argv, k+"="+v)
	}
	for _, check := range append([]string{"true"}, b.def.Checks...) {
		cmd := slices.Concat(argv, []string{"/bin/sh", "-c", "cd /tmp && " + check})
		if err := b.inChroot(ctx, sandboxID+":"+sandboxID, cmd); err != nil {
			return fmt.Errorf("check %q failed: %w", check, err)
		}
	}
	if len(b.def.Checks) > 0 {
		b.prog.note("checks passed: %d", len(b.def.Checks))
	}
	return nil
}

// checkForbidden fails when a package manager or a compiler is in the
// image, or when a folder that must be empty is not.
func checkForbidden(root string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	var found []string
	for _, dir := range binDirs {
		for _, tool := range forbiddenTools {
			if _, err := r.Lstat(path.Join(dir, tool)); err == nil {
				found = append(found, "/"+path.Join(dir, tool))
			}
		}
	}
	for _, m := range forbiddenModules {
		if _, err := r.Lstat(m); err == nil {
			found = append(found, "/"+m)
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("package managers or compilers in the image: %s", strings.Join(found, ", "))
	}
	for _, dir := range emptyDirs {
		if err := checkEmpty(r, dir); err != nil {
			return err
		}
	}
	return nil
}

// checkEmpty fails unless dir holds nothing but other emptyDirs.
func checkEmpty(r *os.Root, dir string) error {
	f, err := r.Open(dir[1:])
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !slices.Contains(emptyDirs, path.Join(dir, n)) {
			return fmt.Errorf("%s must be empty, has %s", dir, n)
		}
	}
	return nil
}

// commit writes the manifest and renames the scratch folder into place.
func (b *build) commit(context.Context) error {
	b.man.Name = b.name
	b.man.Built = time.Now().UTC().Truncate(time.Second)
	b.man.BuildSeconds = time.Since(b.start).Round(time.Second).Seconds()
	b.man.Suite, b.man.Arch = b.suite, b.arch
	b.man.Env = b.def.Environment()
	b.man.User = sandboxID + ":" + sandboxID
	b.man.Definition = b.def
	data, err := json.MarshalIndent(b.man, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.work.dir, manifestFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	var old *scratch
	err = b.store.withLock(func() error {
		if _, err := os.Stat(filepath.Join(b.store.dir, b.name)); err == nil {
			if !b.opts.Replace {
				return fmt.Errorf("image %q appeared during the build: %w", b.name, sandbox.ErrInvalid)
			}
			if old, err = b.store.retire(b.name); err != nil {
				return err
			}
		}
		if err := os.Rename(b.work.dir, filepath.Join(b.store.dir, b.name)); err != nil {
			return err
		}
		b.work.lock.Close()
		b.work = nil
		return nil
	})
	if old != nil {
		if rmErr := old.remove(); err == nil {
			err = rmErr
		}
	}
	return err
}

// notePackageCount prints how many Debian packages the root holds now.
func (b *build) notePackageCount() error {
	f, err := os.Open(filepath.Join(b.root, "var/lib/dpkg/status"))
	if err != nil {
		return err
	}
	defer f.Close()
	pkgs, err := parseDpkgStatus(f)
	if err != nil {
		return err
	}
	b.prog.note("Debian packages installed: %d", len(pkgs))
	return nil
}

// chroot runs a shell script as root inside the root file system with the
// build's environment; args are its positional parameters.
func (b *build) chroot(ctx context.Context, script string, args ...string) error {
	inner := append([]string{"/usr/bin/env", "-i"}, buildEnv...)
	inner = append(inner, "/bin/sh", "-ec", script, "sh")
	return b.inChroot(ctx, "", append(inner, args...))
}

// inChroot runs argv inside the root file system as user ("" for root).
func (b *build) inChroot(ctx context.Context, user string, argv []string) error {
	return b.command(ctx, buildEnv, "/bin/sh", append([]string{"-c", chrootWrapper, "sh", b.root, user}, argv...)...)
}

// command runs a program as PID 1 of new mount and PID namespaces: every
// process it starts dies with it, and every mount it makes disappears,
// when it ends, when ctx is cancelled, or when this process dies.
func (b *build) command(ctx context.Context, env []string, name string, args ...string) error {
	out := &cmdOutput{log: b.opts.Log, prog: b.prog}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Cloneflags:   syscall.CLONE_NEWPID,
		Pdeathsig:    syscall.SIGKILL,
	}
	cmd.WaitDelay = 5 * time.Second
	stop := b.prog.tick(tickInterval)
	err := cmd.Run()
	stop()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w; its last output:\n%s", name, err, out.tail())
	}
	return err
}
