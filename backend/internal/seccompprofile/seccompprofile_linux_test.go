package seccompprofile

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestProfile(t *testing.T) {
	p, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	clone3 := false
	for _, s := range p.Syscalls {
		if s.Includes != nil && len(s.Includes.Caps) > 0 {
			continue // applies only with a capability the sandbox never has
		}
		for _, n := range s.Names {
			if slices.Contains(Removed, n) && s.Action == specs.ActAllow {
				t.Errorf("%s is allowed", n)
			}
			if n == "clone3" {
				clone3 = true
				if s.Action != specs.ActTrace {
					t.Errorf("clone3: %s, want a trace action (ENOSYS with no tracer)", s.Action)
				}
			}
			if n == "socket" {
				if len(s.Args) == 0 || s.Args[0].Op != specs.OpEqualTo ||
					!slices.Contains([]uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}, s.Args[0].Value) {
					t.Errorf("socket rule %+v allows another family", s.Args)
				}
			}
		}
	}
	if !clone3 {
		t.Errorf("no rule for clone3")
	}
	body, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(body), &back); err != nil || back["defaultAction"] != string(specs.ActErrno) {
		t.Errorf("JSON: %v, default action %v", err, back["defaultAction"])
	}
}

func TestOCI(t *testing.T) {
	s, err := OCI(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.Architectures, specs.ArchX86) {
		t.Errorf("i386 allowed: %v", s.Architectures)
	}
	for _, r := range s.Syscalls {
		for _, n := range r.Names {
			// rules that need a capability the sandbox lacks are left out
			if (n == "mount" || n == "unshare" || n == "setns" || n == "chroot") && r.Action == specs.ActAllow {
				t.Errorf("%s allowed without capabilities", n)
			}
		}
	}
}
