package hostroot

import (
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	plan, err := Plan(1000, 1000, "airlock")
	if err != nil {
		t.Fatal(err)
	}
	byDst := map[string]Entry{}
	for _, e := range plan {
		byDst[e.Dst] = e
	}
	if e := byDst["etc/passwd"]; e.Kind != File || !strings.Contains(e.Content, "sandbox:x:1000:1000:") {
		t.Errorf("etc/passwd: %+v", e)
	}
	if e := byDst["etc/hostname"]; e.Content != "airlock\n" {
		t.Errorf("etc/hostname: %q", e.Content)
	}
	if e, ok := byDst["usr"]; !ok || e.Kind != Bind || e.Src != "/usr" {
		t.Errorf("usr: %+v", e)
	}
	for dst, e := range byDst {
		if e.Kind == Bind && strings.HasPrefix(dst, "etc/") && !strings.HasPrefix(e.Src, "/etc/") {
			t.Errorf("%s bound from %s", dst, e.Src)
		}
		for _, secret := range []string{"etc/shadow", "etc/ssh", "etc/sudoers", "root", "home", "var"} {
			if dst == secret {
				t.Errorf("%s is in the plan", dst)
			}
		}
	}
}
