package leakcheck_test

import (
	"context"
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// A live native sandbox's cgroups are found wherever native placed them
// (under this process's own cgroup on most hosts), under this process's
// pid only, and are gone once it is destroyed.
func TestCgroupsOfALiveSandbox(t *testing.T) {
	testenv.Require(t, "root: native sandboxes with cgroups", testenv.Root())
	be := native.New(native.Options{})
	defer be.Close()
	p, err := sandbox.Policy{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	found := leakcheck.Cgroups(os.Getpid())
	other := leakcheck.Cgroups(os.Getppid())
	if err := inst.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Errorf("a live sandbox's cgroups were not found")
	}
	for _, d := range found {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is left after Destroy", d)
		}
	}
	if len(other) != 0 {
		t.Errorf("cgroups found for another pid: %v", other)
	}
	t.Logf("found %v", found)
}
