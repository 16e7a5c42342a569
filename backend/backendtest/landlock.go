//go:build linux

package backendtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// landlockHolder is the other command of testLandlock: it listens on an
// abstract unix socket named after its argument, prints its pid, and
// waits to be killed.
const landlockHolder = `
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[1])
s.listen(16)
print(os.getpid(), flush=True)
s.settimeout(120)
try:
    while True:
        s.accept()[0].close()
except OSError:
    pass
`

// testLandlock runs the checks only Landlock stops (probes/landlock.py):
// writes that mounts and permissions allow outside the writable folders,
// and, while another command of the same sandbox runs, signals and
// abstract-socket connections to it.
func (s *suite) testLandlock(t *testing.T) {
	s.skip(t, "landlock")
	mark := randomMark(t)
	inst := s.create(t, Policy(t, nil))
	holder := StartHolder(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", landlockHolder, mark}}, 60*time.Second)
	if _, err := strconv.Atoi(holder); err != nil {
		t.Fatalf("the holder command printed %q, not its pid", holder)
	}
	s.probe(t, inst, "landlock", map[string]string{"MARK": mark, "HOLDER_PID": holder})
}
