package native

import (
	"strings"
	"testing"
)

// The mount tables of the three kinds of host: this machine cannot become
// a pure v2 host, so the mapping is checked on recorded tables.
const (
	pureV2 = `25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	hybrid = `30 22 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
35 30 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
36 30 0:33 /docker /sys/fs/cgroup/freezer rw shared:17 - cgroup cgroup rw,freezer
`
)

// hybridFreezer is hybrid with the freezer mounted at its root.
var hybridFreezer = strings.Replace(hybrid, "0:33 /docker /sys/fs/cgroup/freezer", "0:33 / /sys/fs/cgroup/freezer", 1)

// selfAtRoot is /proc/self/cgroup of a process at every hierarchy's root.
const selfAtRoot = "0::/\n"

func TestParseCgroups(t *testing.T) {
	cases := []struct {
		name, table, v2offers string
		want                  map[string]string // controller -> "v1 MOUNT" / "v2 MOUNT"
	}{
		{"pure v2", pureV2, "cpuset cpu io memory hugetlb pids rdma misc", map[string]string{
			"memory": "v2 /sys/fs/cgroup", "cpu": "v2 /sys/fs/cgroup", "pids": "v2 /sys/fs/cgroup"}},
		{"pure v2 without cpu delegated", pureV2, "memory pids", map[string]string{
			"memory": "v2 /sys/fs/cgroup", "pids": "v2 /sys/fs/cgroup"}},
		{"hybrid, controllers on v1", hybrid, "", map[string]string{
			"memory": "v1 /sys/fs/cgroup/memory", "cpu": "v1 /sys/fs/cgroup/cpu,cpuacct", "pids": "v1 /sys/fs/cgroup/pids"}},
		{"hybrid, pids moved to v2", hybrid, "pids", map[string]string{
			"memory": "v1 /sys/fs/cgroup/memory", "cpu": "v1 /sys/fs/cgroup/cpu,cpuacct", "pids": "v2 /sys/fs/cgroup/unified"}},
	}
	for _, c := range cases {
		h := parseCgroups(strings.NewReader(c.table), strings.NewReader(selfAtRoot), "airlock", false, func(string) string { return c.v2offers })
		got := map[string]string{}
		for ctl, hy := range h.ctl {
			v := "v1 "
			if hy.v2 {
				v = "v2 "
			}
			got[ctl] = v + hy.mount
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s on %q, want %q", c.name, k, got[k], v)
			}
		}
	}
}

// TestCgroupTracking checks where processes are swept and where
// sandboxes are placed, from recorded tables.
func TestCgroupTracking(t *testing.T) {
	const own = "4:memory:/slice/airlock.service\n8:pids:/\n6:freezer:/\n0::/slice/airlock.service\n"
	cases := []struct {
		name, table, self, v2offers string
		trackUnified                bool
		track                       string // "v2 MOUNT", "v1 MOUNT" or ""
		memParent                   string
	}{
		{"pure v2: cgroup.kill", pureV2, selfAtRoot, "memory pids cpu", false, "v2 /sys/fs/cgroup", "/sys/fs/cgroup/airlock"},
		{"hybrid, the freezer not at its root: a kill loop", hybrid, selfAtRoot, "", false, "", "/sys/fs/cgroup/memory/airlock"},
		{"hybrid: the v1 freezer", hybridFreezer, selfAtRoot, "", false, "v1 /sys/fs/cgroup/freezer", "/sys/fs/cgroup/memory/airlock"},
		{"hybrid, forced onto the unified hierarchy", hybridFreezer, selfAtRoot, "", true, "v2 /sys/fs/cgroup/unified", "/sys/fs/cgroup/memory/airlock"},
		{"hybrid, airlock in a v1 cgroup of its own", hybridFreezer, own, "", false, "v1 /sys/fs/cgroup/freezer", "/sys/fs/cgroup/memory/slice/airlock.service/airlock"},
	}
	for _, c := range cases {
		h := parseCgroups(strings.NewReader(c.table), strings.NewReader(c.self), "airlock", c.trackUnified, func(string) string { return c.v2offers })
		got := ""
		if h.track != nil {
			got = "v1 " + h.track.mount
			if h.track.v2 {
				got = "v2 " + h.track.mount
			}
		}
		if got != c.track {
			t.Errorf("%s: processes swept on %q, want %q", c.name, got, c.track)
		}
		mem := h.ctl[ctlMemory]
		parent, _ := h.parentIn(mem)
		if parent != c.memParent {
			t.Errorf("%s: memory parent %q, want %q", c.name, parent, c.memParent)
		}
	}
}
