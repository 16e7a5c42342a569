package testenv

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test: it records what Require asked of it and,
// like a test, stops the goroutine at Fatalf or Skipf. Require calls
// nothing else.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(f string, args ...any) {
	r.fatal = fmt.Sprintf(f, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(f string, args ...any) {
	r.skip = fmt.Sprintf(f, args...)
	runtime.Goexit()
}

func require(need string, err error) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Require(r, need, err)
	}()
	<-done
	return r
}

func TestRequire(t *testing.T) {
	missing := errors.New("no such tool")
	for _, c := range []struct {
		ci          string
		err         error
		fatal, skip bool
	}{
		{"", nil, false, false},
		{"1", nil, false, false},
		{"", missing, false, true},
		{"0", missing, false, true},
		{"1", missing, true, false},
	} {
		t.Setenv("AIRLOCK_CI", c.ci)
		r := require("a tool", c.err)
		if (r.fatal != "") != c.fatal || (r.skip != "") != c.skip {
			t.Errorf("AIRLOCK_CI=%q err=%v: fatal %q, skip %q; want fatal %v, skip %v", c.ci, c.err, r.fatal, r.skip, c.fatal, c.skip)
		}
		if msg := r.fatal + r.skip; msg != "" && !(strings.Contains(msg, "a tool") && strings.Contains(msg, "no such tool")) {
			t.Errorf("message %q does not name both the need and the error", msg)
		}
	}
}
