package hostroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Kinds of entries.
const (
	Dir     = "dir"     // Dst is a folder with Mode
	File    = "file"    // Dst is a file holding Content, with Mode
	Symlink = "symlink" // Dst is a symlink to Target
	Bind    = "bind"    // host path Src is bound read-only at Dst
)

// Entry is one step of building the root; Dst is relative to the root.
type Entry struct {
	Kind    string
	Dst     string
	Src     string
	Target  string
	Content string
	Mode    fs.FileMode
}

// systemDirs are the host folders (or their symlinks) the root takes.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcAllow lists what the root takes from the host's /etc.
var etcAllow = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts",
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates", "localtime", "timezone",
	"mime.types", "os-release", "debian_version", "lsb-release", "matplotlibrc",
	"magic", "magic.mime", "protocols", "services", "gai.conf", "host.conf",
	"ImageMagick-6", "python3", "python3.11", "python3.12", "python3.13",
}

// Plan lists the entries of the host image for a sandbox user uid:gid
// and a host name, in the order they must be made.
func Plan(uid, gid int, hostname string) ([]Entry, error) {
	var plan []Entry
	for _, d := range systemDirs {
		e, ok, err := FromHost("/"+d, d)
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, e)
		}
	}
	plan = append(plan, Entry{Kind: Dir, Dst: "etc", Mode: 0o755})
	plan = append(plan, madeUpEtc(uid, gid, hostname)...)
	for _, name := range etcAllow {
		e, ok, err := FromHost("/etc/"+name, "etc/"+name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if dir := filepath.Dir(e.Dst); dir != "etc" {
			plan = append(plan, Entry{Kind: Dir, Dst: dir, Mode: 0o755})
		}
		plan = append(plan, e)
	}
	return plan, nil
}

// FromHost turns one host path into an entry: a symlink is recreated, a
// folder or regular file is bound. Missing paths and other kinds are
// left out.
func FromHost(src, dst string) (Entry, bool, error) {
	st, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return Entry{}, false, err
		}
		return Entry{Kind: Symlink, Dst: dst, Target: t}, true, nil
	case st.IsDir() || st.Mode().IsRegular():
		return Entry{Kind: Bind, Dst: dst, Src: src}, true, nil
	}
	return Entry{}, false, nil
}

// madeUpEtc is the /etc content the root gets instead of the host's.
func madeUpEtc(uid, gid int, hostname string) []Entry {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	file := func(name, content string) Entry {
		return Entry{Kind: File, Dst: "etc/" + name, Mode: 0o644, Content: content}
	}
	return []Entry{
		file("passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n"+
			"sandbox:x:"+u+":"+g+":sandbox:/tmp:/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
		file("group", "root:x:0:\nsandbox:x:"+g+":\nnogroup:x:65534:\n"),
		file("hosts", "127.0.0.1\tlocalhost "+hostname+"\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
		file("hostname", hostname+"\n"),
		file("nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n"),
	}
}
