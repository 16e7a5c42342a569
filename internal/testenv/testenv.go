// Package testenv lets tests say what they need from the machine. Where a
// need is unmet, a test skips with the reason printed; under CI
// (AIRLOCK_CI=1, set by .ci/run, which installs and starts everything the
// tests need) it fails instead, so nothing is skipped there by accident.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// CI reports whether the tests run under .ci/run.
func CI() bool { return os.Getenv("AIRLOCK_CI") == "1" }

// Require skips t, or fails it under CI, when err says a need is unmet.
func Require(t testing.TB, need string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("%s is required under CI (AIRLOCK_CI=1) but missing: %v", need, err)
	}
	t.Skipf("skipped: needs %s: %v (CI installs it; run .ci/run)", need, err)
}

// Root is nil when the tests run as root (CI runs as root), else an error
// naming the uid, for Require.
func Root() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("running as uid %d, not root", uid)
	}
	return nil
}
