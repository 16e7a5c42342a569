package interp_test

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
)

// attackLib finds the runner's protocol descriptor (the FIFO to the
// relay) from inside a cell, and the id of the call that runs, the way
// hostile code would.
const attackLib = `
import os, struct, json, sys, subprocess, threading, time
def proto_fd():
    for fd in os.listdir('/proc/self/fd'):
        try:
            if 'airlock-interp' in os.readlink('/proc/self/fd/' + fd):
                return int(fd)
        except OSError:
            pass
    raise SystemExit('no protocol descriptor found')
def call_id():
    f = sys._getframe()
    while f is not None:
        s = f.f_globals.get('S')
        if s is not None and hasattr(s, 'call'):
            return s.call
        f = f.f_back
def frame(body):
    os.write(proto_fd(), struct.pack('>I', len(body)) + body)
def forged(**kw):
    frame(json.dumps(kw).encode())
`

// heapWatch samples the host's heap while attacks run and reports the
// peak above the start.
type heapWatch struct {
	base uint64
	peak atomic.Uint64
	stop chan struct{}
	done sync.WaitGroup
}

func watchHeap() *heapWatch {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h := &heapWatch{base: m.HeapAlloc, stop: make(chan struct{})}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > h.peak.Load() {
				h.peak.Store(m.HeapAlloc)
			}
			select {
			case <-h.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return h
}

// growth stops the watch and returns the peak growth in bytes.
func (h *heapWatch) growth() uint64 {
	close(h.stop)
	h.done.Wait()
	if p := h.peak.Load(); p > h.base {
		return p - h.base
	}
	return 0
}

func TestForgedFrames(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{Grace: time.Second, Preload: attackLib})
	cases := []struct {
		name, code string
		want       string // the error event's name; "" for none
		restarted  bool
		check      func(t *testing.T, x interp.Execution)
	}{
		{"an event of another call", "forged(type='stdout', id=999999, text='x')", interp.ErrorProtocol, true, nil},
		{"an event of this call", "forged(type='stdout', id=call_id(), text='FORGED\\n')\nprint('real')", "", false,
			func(t *testing.T, x interp.Execution) {
				if !strings.Contains(x.Stdout, "FORGED") || !strings.Contains(x.Stdout, "real") {
					t.Errorf("stdout %q: a forged event of its own call garbles its own output, and that is all", x.Stdout)
				}
			}},
		{"a ready frame during a call", "forged(type='ready', runner='x', language='python')", interp.ErrorProtocol, true, nil},
		{"an unknown field", "forged(type='stdout', id=call_id(), text='x', extra=1)", interp.ErrorProtocol, true, nil},
		{"a wrong type", "forged(type='end', id=call_id(), execution_count='seven')", interp.ErrorProtocol, true, nil},
		{"a length of 4 GiB", "os.write(proto_fd(), b'\\xff\\xff\\xff\\xff')", interp.ErrorProtocol, true,
			func(t *testing.T, x interp.Execution) {
				if !strings.Contains(x.Error.Value, "over the limit") {
					t.Errorf("error %q", x.Error.Value)
				}
			}},
		{"15 MiB of garbage under the limit", "n = 15 << 20\nos.write(proto_fd(), struct.pack('>I', n))\nfd = proto_fd()\nfor i in range(15):\n    os.write(fd, b'x' * (1 << 20))",
			interp.ErrorProtocol, true, nil},
		{"random bytes", "os.write(proto_fd(), os.urandom(65536))", interp.ErrorProtocol, true, nil},
		{"random bytes from a subprocess", "subprocess.run(['sh', '-c', 'head -c 65536 /dev/urandom > /proc/%d/fd/%d' % (os.getpid(), proto_fd())])",
			interp.ErrorProtocol, true, nil},
		{"a traceback of 500000 lines", "forged(type='error', id=call_id(), name='E', traceback=[''] * 500000)", interp.ErrorProtocol, true, nil},
		{"a bundle of 10000 types", "forged(type='result', id=call_id(), data={'text/x%d' % i: '' for i in range(10000)})", interp.ErrorProtocol, true, nil},
		{"a flood of valid events", "fd = proto_fd()\nb = json.dumps(dict(type='stdout', id=call_id(), text='y' * 60000)).encode()\nfor i in range(800):\n    os.write(fd, struct.pack('>I', len(b)) + b)",
			interp.ErrorProtocol, true,
			func(t *testing.T, x interp.Execution) {
				// the call's budget, or its relay's: the flood is not the runner's
				if !strings.Contains(x.Error.Value, "limit") || !x.OutputTruncated || len(x.Stdout) > 1<<20+1024 {
					t.Errorf("error %q, truncated %v, kept %d bytes", x.Error.Value, x.OutputTruncated, len(x.Stdout))
				}
			}},
		// the runner's own frames fill the rest of it: garbled, or the call
		// waits for bytes that never come until its timeout
		{"half a frame", "os.write(proto_fd(), struct.pack('>I', 100) + b'{\"type\":')", "ProtocolError or Timeout", true, nil},
	}
	// cases that end by a limit get long enough not to end by their
	// timeout on a loaded host
	byLimit := map[string]bool{"a flood of valid events": true, "15 MiB of garbage under the limit": true}
	heap := watchHeap()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			timeout := 5 * time.Second
			if byLimit[tc.name] {
				timeout = 2 * time.Minute
			}
			x := run(t, c, tc.code, timeout)
			if !strings.Contains(tc.want, errorName(x)) || (errorName(x) == "") != (tc.want == "") || x.Restarted != tc.restarted {
				t.Errorf("error %q restarted %v (%s), want %q %v", errorName(x), x.Restarted, events(x), tc.want, tc.restarted)
			}
			if tc.check != nil && x.Error != nil == (tc.want != "") {
				tc.check(t, x)
			}
			if x := ok(t, run(t, c, "6 * 7", 30*time.Second)); text(x) != "42" {
				t.Errorf("the next call: %s", events(x))
			}
		})
	}
	grew := heap.growth()
	t.Logf("the host's heap grew by at most %.1f MiB during the attacks", float64(grew)/(1<<20))
	if grew > 160<<20 {
		t.Errorf("the host's heap grew by %d MiB, want it bounded by the frame, call and relay budgets", grew>>20)
	}
}

func TestFramesBetweenCalls(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{Preload: attackLib})
	for _, code := range []string{
		// a thread of the runner, after its call ended
		"threading.Thread(target=lambda: (time.sleep(0.3), forged(type='stdout', id=call_id() or 1, text='late'))).start()",
		// a forked copy of the runner
		"if os.fork() == 0:\n    time.sleep(0.3)\n    os.write(proto_fd(), b'\\0\\0\\0\\2{}')\n    os._exit(0)",
	} {
		ok(t, run(t, c, code, 30*time.Second))
		time.Sleep(time.Second)
		x := ok(t, run(t, c, "1 + 1", 30*time.Second))
		if !x.Restarted || !strings.Contains(events(x), "between calls") || text(x) != "2" {
			t.Errorf("after %q: %s", code, events(x))
		}
	}
}

func TestForgedFramesOtherLanguages(t *testing.T) {
	inst := hostSandbox(t)
	for _, tc := range []struct{ lang, code string }{
		// node's own channel to the runner
		{interp.JavaScript, "const cfg = JSON.parse(process.argv.at(-1)); require('fs').writeSync(cfg.msg, Buffer.from([255, 255, 255, 255, 1, 2]))"},
		// the runner's channel to the host, reached through /proc
		{interp.JavaScript, "const fs = require('fs'); const d = `/proc/${process.ppid}/fd`; for (const f of fs.readdirSync(d)) { if (fs.readlinkSync(`${d}/${f}`).includes('airlock-interp')) fs.writeFileSync(`${d}/${f}`, Buffer.alloc(64, 255)) }"},
		{interp.Bash, "for f in /proc/$PPID/fd/*; do case $(readlink $f) in *airlock-interp*) printf '\\377\\377\\377\\377' > $f;; esac; done; sleep 1"},
	} {
		c := start(t, inst, interp.Options{Language: tc.lang})
		x := run(t, c, tc.code, 10*time.Second)
		if !x.Restarted || (errorName(x) != interp.ErrorProtocol && errorName(x) != interp.ErrorDied) {
			t.Errorf("%s: %q: %s", tc.lang, tc.code, events(x))
		}
		if x := ok(t, run(t, c, map[string]string{interp.JavaScript: "1 + 1", interp.Bash: "echo 2"}[tc.lang], 30*time.Second)); !strings.Contains(text(x)+x.Stdout, "2") {
			t.Errorf("%s: the next call: %s", tc.lang, events(x))
		}
	}
}

// TestTransportRotation pushes many relays' worth of events through one
// context: the runner moves to a fresh relay before one could run out,
// and its state stays.
func TestTransportRotation(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{FrameLimit: 64 << 10, CallLimit: 1 << 20, OutputLimit: 512 << 10})
	ok(t, run(t, c, "kept = 'yes'\nline = 'z' * 1023", 30*time.Second))
	heap := watchHeap()
	for i := 0; i < 70; i++ { // 70 × 512 KiB: 35 MiB, eight relays' worth
		x := ok(t, run(t, c, "for i in range(512):\n    print(line)", 30*time.Second))
		if x.Restarted || len(x.Stdout) != 512<<10 {
			t.Fatalf("call %d: restarted %v, %d bytes of output (%s)", i, x.Restarted, len(x.Stdout), events(x))
		}
	}
	if x := ok(t, run(t, c, "kept", 30*time.Second)); text(x) != "'yes'" || x.ExecutionCount != 72 {
		t.Errorf("after the relays: %s count %d", events(x), x.ExecutionCount)
	}
	t.Logf("the host's heap grew by at most %.1f MiB", float64(heap.growth())/(1<<20))
}
