package interp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image/png"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// kernel is one way to run Python: the stdlib kernel on the host image,
// IPython on the python image.
type kernel struct {
	name  string
	image func(testing.TB) sandbox.Image
	opts  interp.Options
}

var kernels = []kernel{
	{"stdlib", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{}},
	{"ipython", pythonImage, interp.Options{}},
}

// dataKernels run on the python image, with pandas and matplotlib.
var dataKernels = []kernel{
	{"ipython", pythonImage, interp.Options{}},
	{"stdlib", pythonImage, interp.Options{Runner: "stdlib"}},
}

func eachKernel(t *testing.T, ks []kernel, fn func(t *testing.T, c *interp.Context)) {
	for _, k := range ks {
		t.Run(k.name, func(t *testing.T) {
			inst := newSandbox(t, k.image(t), nil)
			c := start(t, inst, k.opts)
			if k.name == "ipython" && !strings.HasPrefix(c.Runner(), "ipython") {
				t.Fatalf("the python image's context runs %q, want IPython", c.Runner())
			}
			fn(t, c)
		})
	}
}

func TestPythonState(t *testing.T) {
	eachKernel(t, kernels, func(t *testing.T, c *interp.Context) {
		ok(t, run(t, c, "import json\nx = 40\ndef inc(v):\n    return v + 1", 30*time.Second))
		x := ok(t, run(t, c, "print('x is', x)\ninc(x) + 1", 30*time.Second))
		if text(x) != "42" || x.Stdout != "x is 40\n" || x.ExecutionCount != 2 {
			t.Errorf("second call: result %q stdout %q count %d, want 42, \"x is 40\\n\", 2", text(x), x.Stdout, x.ExecutionCount)
		}
		x = ok(t, run(t, c, "{'x': [x, None, 'é']}", 30*time.Second))
		if r := x.Results[0]; r[interp.MIMEJSON] != `{"x":[40,null,"\u00e9"]}` || r[interp.MIMEText] != "{'x': [40, None, 'é']}" {
			t.Errorf("a dict: %v", r)
		}
		x = ok(t, run(t, c, "json.dumps({'x': x});", 30*time.Second))
		if len(x.Results) != 0 {
			t.Errorf("a trailing semicolon showed %q", text(x))
		}
		x = ok(t, run(t, c, "display({'a': 1})\nNone", 30*time.Second))
		if len(x.Events) != 2 || x.Events[0].Type != interp.EventDisplay || !strings.Contains(x.Events[0].Data[interp.MIMEText], "'a': 1") {
			t.Errorf("display: %s %+v", events(x), x.Events)
		}
		last := x.Events[len(x.Events)-1]
		if last.Type != interp.EventEnd || last.ExecutionCount != 5 || last.DurationMS <= 0 {
			t.Errorf("end event %+v", last)
		}
		// a lone surrogate is no UTF-8: it comes as U+FFFD
		if x := ok(t, run(t, c, "type('X', (), {'__repr__': lambda s: 'a\\udc80b'})()", 30*time.Second)); text(x) != "a\uFFFDb" {
			t.Errorf("a repr with a lone surrogate: %q", text(x))
		}
	})
}

func TestPythonErrors(t *testing.T) {
	eachKernel(t, kernels, func(t *testing.T, c *interp.Context) {
		ok(t, run(t, c, "y = 5", 30*time.Second))
		x := run(t, c, "def f():\n    return 1/0\nprint('before')\nf()", 30*time.Second)
		if x.Error == nil || x.Error.Name != "ZeroDivisionError" || x.Error.Value != "division by zero" {
			t.Fatalf("error %+v, want ZeroDivisionError: division by zero (%s)", x.Error, events(x))
		}
		tb := strings.Join(x.Error.Traceback, "\n")
		if !strings.Contains(tb, "return 1/0") || !strings.Contains(tb, "ZeroDivisionError") || strings.Contains(tb, "on_sigint") || strings.Contains(tb, "<string>") {
			t.Errorf("traceback, want the cell's frames only:\n%s", tb)
		}
		if x.Stdout != "before\n" || x.Events[0].Type != interp.EventStdout {
			t.Errorf("output before the error: %q, events %s", x.Stdout, events(x))
		}
		x = run(t, c, "def (", 30*time.Second)
		if errorName(x) != "SyntaxError" {
			t.Errorf("syntax error: %s", events(x))
		}
		if x := ok(t, run(t, c, "y", 30*time.Second)); text(x) != "5" {
			t.Errorf("state after errors: %q", text(x))
		}
	})
}

func TestDataFrameHTML(t *testing.T) {
	eachKernel(t, dataKernels, func(t *testing.T, c *interp.Context) {
		x := ok(t, run(t, c, "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [3, 4]})\ndf", time.Minute))
		if len(x.Results) != 1 {
			t.Fatalf("results %v", x.Results)
		}
		r := x.Results[0]
		if !strings.Contains(r[interp.MIMEHTML], "<table") || !strings.Contains(r[interp.MIMEHTML], "Oslo") || !strings.Contains(r[interp.MIMEText], "Lima") {
			t.Errorf("DataFrame bundle: %v", r)
		}
	})
}

func decodePNG(t *testing.T, b64 string) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("image/png is not base64: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("image/png does not decode: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
		t.Errorf("figure of %v", r)
	}
}

func TestFigurePNG(t *testing.T) {
	eachKernel(t, dataKernels, func(t *testing.T, c *interp.Context) {
		ok(t, run(t, c, "import matplotlib.pyplot as plt", time.Minute))
		// a figure left open is shown after the cell, then closed
		x := ok(t, run(t, c, "plt.plot([1, 3, 2])\nplt.title('left open');", time.Minute))
		if len(x.Events) != 2 || x.Events[0].Type != interp.EventDisplay {
			t.Fatalf("left open: %s", events(x))
		}
		decodePNG(t, x.Events[0].Data[interp.MIMEPNG])
		// plt.show() shows it where it is called, between the prints
		x = ok(t, run(t, c, "print('before')\nplt.plot([1, 2])\nplt.show()\nprint('after')\nlen(plt.get_fignums())", time.Minute))
		if got := events(x); got != "stdout display stdout result end" {
			t.Fatalf("shown: %s", got)
		}
		decodePNG(t, x.Events[1].Data[interp.MIMEPNG])
		if x.Stdout != "before\nafter\n" || text(x) != "0" {
			t.Errorf("shown: stdout %q, open figures %q", x.Stdout, text(x))
		}
		x = ok(t, run(t, c, "len(plt.get_fignums())", time.Minute))
		if text(x) != "0" || len(x.Events) != 2 {
			t.Errorf("after the cells: %s, %s figures open", events(x), text(x))
		}
	})
}

func TestPythonInterrupt(t *testing.T) {
	eachKernel(t, kernels, func(t *testing.T, c *interp.Context) {
		ok(t, run(t, c, "n = 0", 30*time.Second))
		x := run(t, c, "while True:\n    n += 1", time.Second)
		if !x.Interrupted || x.Restarted || errorName(x) != "KeyboardInterrupt" {
			t.Fatalf("interrupted %v restarted %v: %s", x.Interrupted, x.Restarted, events(x))
		}
		if end := x.Events[len(x.Events)-1]; !strings.Contains(end.Reason, "timeout of 1s") {
			t.Errorf("end event %+v", end)
		}
		x = ok(t, run(t, c, "n > 0", 30*time.Second))
		if text(x) != "True" {
			t.Errorf("after the interrupt: %q", text(x))
		}
		// a blocking call is interrupted too
		x = run(t, c, "import time\ntime.sleep(60)", time.Second)
		if errorName(x) != "KeyboardInterrupt" || x.Restarted {
			t.Errorf("sleep: %s", events(x))
		}
	})
}

func TestPythonIgnoresSIGINT(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{Grace: time.Second})
	ok(t, run(t, c, "kept = 1", 30*time.Second))
	x := run(t, c, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", time.Second)
	if !x.Interrupted || !x.Restarted || errorName(x) != interp.ErrorTimeout {
		t.Fatalf("interrupted %v restarted %v: %s", x.Interrupted, x.Restarted, events(x))
	}
	if !strings.Contains(events(x), "restarted(the call ran past its timeout of 1s and did not stop within 1s of SIGINT") {
		t.Errorf("events %s", events(x))
	}
	x = run(t, c, "1 + 1", 30*time.Second)
	if text(x) != "2" || x.ExecutionCount != 1 || x.Restarted {
		t.Errorf("after the restart: %s, count %d", events(x), x.ExecutionCount)
	}
	if x := run(t, c, "kept", 30*time.Second); errorName(x) != "NameError" {
		t.Errorf("the state survived a restart: %s", events(x))
	}
}

// The default grace is DefaultGrace plus the runner's start: a slow
// machine is given time to stop in proportion.
func TestDefaultGraceCountsTheStart(t *testing.T) {
	inst := hostSandbox(t)
	t0 := time.Now()
	c := start(t, inst, interp.Options{})
	took := time.Since(t0)
	x := run(t, c, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)", time.Second)
	m := regexp.MustCompile(`restarted\(the call ran past its timeout of 1s and did not stop within (\S+) of SIGINT`).FindStringSubmatch(events(x))
	if !x.Restarted || m == nil {
		t.Fatalf("a call that ignores SIGINT: %s", events(x))
	}
	grace, err := time.ParseDuration(m[1])
	t.Logf("the start took %v, the grace was %s", took.Round(time.Millisecond), m[1])
	if err != nil || grace <= interp.DefaultGrace || grace > interp.DefaultGrace+took {
		t.Errorf("the grace was %s, want over %v and at most %v (the start took %v)", m[1], interp.DefaultGrace, interp.DefaultGrace+took, took)
	}
}

func TestPythonForkBomb(t *testing.T) {
	inst := newSandbox(t, sandbox.HostImage(), func(p *sandbox.Policy) { p.Limits.Pids = 64 })
	c := start(t, inst, interp.Options{})
	bomb := "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
	t0 := time.Now()
	x := run(t, c, bomb, 2*time.Second)
	if !x.Interrupted && !x.Restarted {
		t.Errorf("the fork bomb was neither interrupted nor restarted: %s", events(x))
	}
	t.Logf("the bomb's call: %s in %v", events(x), time.Since(t0).Round(time.Millisecond))
	x = ok(t, run(t, c, "import subprocess\nsubprocess.run(['true']).returncode", 30*time.Second))
	if text(x) != "0" {
		t.Errorf("after the bomb, a subprocess: %s %q", events(x), text(x))
	}
}

func TestPythonMemoryBomb(t *testing.T) {
	inst := newSandbox(t, sandbox.HostImage(), func(p *sandbox.Policy) { p.Limits.MemoryBytes = 256 << 20 })
	c := start(t, inst, interp.Options{})
	x := run(t, c, "a = []\nwhile True:\n    a.append(bytearray(16 << 20))", time.Minute)
	if !x.Restarted || errorName(x) != interp.ErrorDied || !strings.Contains(x.Error.Value, "memory") {
		t.Errorf("memory bomb: %s", events(x))
	}
	if x := ok(t, run(t, c, "6 * 7", 30*time.Second)); text(x) != "42" {
		t.Errorf("after the bomb: %s", events(x))
	}
	if inst.Err() != nil {
		t.Errorf("the sandbox ended: %v", inst.Err())
	}
}

func TestSubprocesses(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{})
	// what a subprocess prints is the call's output
	x := ok(t, run(t, c, "import os, subprocess\nsubprocess.run(['echo', 'from a child'])\nos.system('echo from system >&2')", 30*time.Second))
	if x.Stdout != "from a child\n" || x.Stderr != "from system\n" {
		t.Errorf("stdout %q stderr %q", x.Stdout, x.Stderr)
	}
	// a background process outlives its call
	ok(t, run(t, c, "bg = subprocess.Popen(['sleep', '300'])", 30*time.Second))
	x = ok(t, run(t, c, "bg.poll() is None and os.path.exists('/proc/%d' % bg.pid)", 30*time.Second))
	if text(x) != "True" {
		t.Errorf("the background process after its call: %q", text(x))
	}
	// what it prints between calls comes with the next call
	ok(t, run(t, c, "subprocess.Popen(['sh', '-c', 'sleep 0.3; echo late'])", 30*time.Second))
	time.Sleep(time.Second)
	x = ok(t, run(t, c, "bg.poll() is None", 30*time.Second))
	if x.Stdout != "late\n" || text(x) != "True" {
		t.Errorf("the next call: stdout %q, background alive %q", x.Stdout, text(x))
	}
	// an interrupted call's leftovers are killed, earlier ones are not
	x = interruptAfter(t, c, "p = subprocess.Popen(['sleep', '300'])\nprint('started', flush=True)\nimport time\ntime.sleep(60)", "started")
	if errorName(x) != "KeyboardInterrupt" || !strings.Contains(x.Stderr, "left 1 processes running") {
		t.Errorf("interrupted: %s, stderr %q", events(x), x.Stderr)
	}
	x = ok(t, run(t, c, "p.wait(5), bg.poll()", 30*time.Second))
	if text(x) != "(-9, None)" {
		t.Errorf("after the interrupt, the call's child and the earlier one: %q, want (-9, None)", text(x))
	}
}

// An interrupt that lands in library code ends the call within the grace
// period on a slow machine too (IPython's context traceback of such frames
// takes seconds under TCG): the kernel formats that traceback plainly, and
// later ones in its own mode again.
func TestInterruptInLibrary(t *testing.T) {
	inst := newSandbox(t, pythonImage(t), nil)
	c := start(t, inst, interp.Options{})
	ok(t, run(t, c, "n = 1", 30*time.Second))
	// the child prints once the runner waits in subprocess.run for it
	x := interruptAfter(t, c, "import subprocess\nsubprocess.run(['sh', '-c', 'echo started; sleep 60'])", "started")
	if errorName(x) != "KeyboardInterrupt" || x.Restarted {
		t.Fatalf("interrupted in subprocess.run: %s", events(x))
	}
	tb := strings.Join(x.Error.Traceback, "\n")
	if !strings.Contains(tb, "subprocess.py") || strings.Contains(tb, "---->") {
		t.Errorf("the interrupted call's traceback, want subprocess.py's frames, plainly:\n%s", tb)
	}
	x = run(t, c, "n / 0", 30*time.Second)
	if errorName(x) != "ZeroDivisionError" || !strings.Contains(strings.Join(x.Error.Traceback, "\n"), "----> 1 n / 0") {
		t.Errorf("a later error, want IPython's context traceback: %s %+v", events(x), x.Error)
	}
}

func TestStreaming(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{})
	var mu sync.Mutex
	var seen []time.Time
	var types []string
	x, err := c.Run(context.Background(), "import time\nprint('a')\ntime.sleep(1)\nprint('b')\n7", 30*time.Second, func(ev interp.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, time.Now())
		types = append(types, ev.Type)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(types, " "); got != "stdout stdout result end" || events(x) != got {
		t.Fatalf("events streamed %s, kept %s", got, events(x))
	}
	if gap := seen[1].Sub(seen[0]); gap < 500*time.Millisecond {
		t.Errorf("the first line came %v before the second, want it as it was printed", gap)
	}
}

func TestPreloadFails(t *testing.T) {
	inst := hostSandbox(t)
	_, err := interp.Start(context.Background(), inst, interp.Options{Preload: "import no_such_module_here"})
	if !errors.Is(err, interp.ErrStart) || !strings.Contains(err.Error(), "ModuleNotFoundError") {
		t.Errorf("start with a failing preload: %v", err)
	}
	c := start(t, inst, interp.Options{Preload: "import json\nloaded = 3"})
	if x := ok(t, run(t, c, "json.dumps(loaded)", 30*time.Second)); text(x) != "'3'" || x.ExecutionCount != 1 {
		t.Errorf("after a preload: %s count %d", events(x), x.ExecutionCount)
	}
}

func TestOutputLimit(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{OutputLimit: 10 << 10})
	x := ok(t, run(t, c, "import sys\nfor i in range(2000):\n    print('line', i, 'x' * 100)\nsys.stderr.write('e' * 100000)\n'done'", 30*time.Second))
	if !x.OutputTruncated || len(x.Stdout)+len(x.Stderr) > 10<<10+300 || !strings.Contains(x.Stdout+x.Stderr, "output truncated at 10240 bytes") {
		t.Errorf("truncated %v, kept %d+%d bytes", x.OutputTruncated, len(x.Stdout), len(x.Stderr))
	}
	if text(x) != "'done'" {
		t.Errorf("result after the truncation: %s", events(x))
	}
	if x := ok(t, run(t, c, "print('small')", 30*time.Second)); x.Stdout != "small\n" || x.OutputTruncated {
		t.Errorf("the next call: %q", x.Stdout)
	}
}

func TestRestartAndClose(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{Name: "main"})
	if c.ID() != "main" || c.Language() != interp.Python {
		t.Errorf("id %q language %q", c.ID(), c.Language())
	}
	ok(t, run(t, c, "a = 1", 30*time.Second))
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if x := run(t, c, "a", 30*time.Second); errorName(x) != "NameError" || x.ExecutionCount != 1 {
		t.Errorf("after Restart: %s count %d", events(x), x.ExecutionCount)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), "while True:\n    pass", 0, nil)
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, interp.ErrClosed) {
			t.Errorf("the running call after Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the running call")
	}
	if _, err := c.Run(context.Background(), "1", 0, nil); !errors.Is(err, interp.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestRunContextEnds(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{})
	ok(t, run(t, c, "kept = 1", 30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	x, err := c.Run(ctx, "import time\ntime.sleep(60)", 0, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !x.Interrupted || errorName(x) != "KeyboardInterrupt" {
		t.Errorf("a call whose ctx ended: %v, %s", err, events(x))
	}
	if x := ok(t, run(t, c, "kept", 30*time.Second)); text(x) != "1" {
		t.Errorf("after it: %s", events(x))
	}
}

func TestSandboxDestroyed(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{})
	ok(t, run(t, c, "1", 30*time.Second))
	if err := inst.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(context.Background(), "1", 30*time.Second, nil); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("a call after the sandbox was destroyed: %v, want ErrDestroyed", err)
	}
}
