package native

import (
	"errors"
	"fmt"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// The sandbox's root is a fresh tmpfs. Into it go read-only binds of the
// image's folders, a synthesized /etc, a minimal /dev, a fresh /proc with
// its sensitive files masked, and the writable folders. The supervisor
// decides what goes in (this file); init, inside the new namespaces,
// carries it out (nsinit.buildRoot).

// hostSystemDirs are the host folders the "host" image binds read-only.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtcAllow lists what the "host" image takes from the host's /etc: the
// dynamic loader's cache, certificates, fonts, time zone, MIME and
// protocol tables. Never the rest of /etc (no shadow, ssh, credentials).
var hostEtcAllow = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts",
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates", "localtime", "timezone",
	"mime.types", "os-release", "debian_version", "lsb-release", "matplotlibrc",
	"magic", "magic.mime", "protocols", "services", "gai.conf", "host.conf",
	"ImageMagick-6", "python3", "python3.11", "python3.12", "python3.13",
}

// imageReserved are top-level names of an image folder that the sandbox
// provides itself.
var imageReserved = map[string]bool{
	"proc": true, "dev": true, "sys": true, "tmp": true, "workspace": true, "run": true,
}

// hostPlan builds the root for the "host" image.
func hostPlan(uid, gid int) ([]nsinit.RootEntry, error) {
	var plan []nsinit.RootEntry
	for _, d := range hostSystemDirs {
		e, ok, err := planEntry("/"+d, d)
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, e)
		}
	}
	plan = append(plan, nsinit.RootEntry{Kind: nsinit.EntryDir, Dst: "etc", Mode: 0o755})
	plan = append(plan, synthesizedEtc(uid, gid)...)
	for _, name := range hostEtcAllow {
		e, ok, err := planEntry("/etc/"+name, "etc/"+name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if dir := filepath.Dir(e.Dst); dir != "etc" {
			plan = append(plan, nsinit.RootEntry{Kind: nsinit.EntryDir, Dst: dir, Mode: 0o755})
		}
		plan = append(plan, e)
	}
	return plan, nil
}

// dirPlan builds the root for an image folder: every top-level entry but
// the reserved ones, bound read-only.
func dirPlan(dir string) ([]nsinit.RootEntry, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("image %s is not a folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	var plan []nsinit.RootEntry
	for _, de := range ents {
		if imageReserved[de.Name()] {
			continue
		}
		e, ok, err := planEntry(filepath.Join(dir, de.Name()), de.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, e)
		}
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("image folder %s is empty", dir)
	}
	return plan, nil
}

// planEntry turns one host path into a plan entry: a symlink is recreated,
// a folder or regular file is bound. Missing paths and other kinds are
// left out.
func planEntry(src, dst string) (nsinit.RootEntry, bool, error) {
	st, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nsinit.RootEntry{}, false, nil
	}
	if err != nil {
		return nsinit.RootEntry{}, false, err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return nsinit.RootEntry{}, false, err
		}
		return nsinit.RootEntry{Kind: nsinit.EntrySymlink, Dst: dst, Target: t}, true, nil
	case st.IsDir() || st.Mode().IsRegular():
		return nsinit.RootEntry{Kind: nsinit.EntryBind, Dst: dst, Src: src}, true, nil
	}
	return nsinit.RootEntry{}, false, nil
}

// synthesizedEtc is the minimal /etc the host image gets instead of the
// host's: the sandbox user, localhost, and name-service order.
func synthesizedEtc(uid, gid int) []nsinit.RootEntry {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	return []nsinit.RootEntry{
		{Kind: nsinit.EntryFile, Dst: "etc/passwd", Mode: 0o644, Content: "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"sandbox:x:" + u + ":" + g + ":sandbox:/tmp:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{Kind: nsinit.EntryFile, Dst: "etc/group", Mode: 0o644, Content: "root:x:0:\nsandbox:x:" + g + ":\nnogroup:x:65534:\n"},
		{Kind: nsinit.EntryFile, Dst: "etc/hosts", Mode: 0o644, Content: "127.0.0.1\tlocalhost " + nsinit.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{Kind: nsinit.EntryFile, Dst: "etc/hostname", Mode: 0o644, Content: nsinit.Hostname + "\n"},
		{Kind: nsinit.EntryFile, Dst: "etc/nsswitch.conf", Mode: 0o644, Content: "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
}
