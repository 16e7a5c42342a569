package interp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestBash(t *testing.T) {
	inst := hostSandbox(t)
	c := start(t, inst, interp.Options{Language: interp.Bash})
	if !strings.HasPrefix(c.Runner(), "bash ") {
		t.Errorf("runner %q", c.Runner())
	}
	ok(t, run(t, c, "x=41; declare -A m=([k]=v); cd /tmp\ngreet() { echo \"hello $1\"; }", 30*time.Second))
	x := ok(t, run(t, c, "echo $((x + 1)) ${m[k]} $PWD; greet 'it''s'; echo 'to stderr' >&2", 30*time.Second))
	if x.Stdout != "42 v /tmp\nhello its\n" || x.Stderr != "to stderr\n" || x.ExecutionCount != 2 {
		t.Errorf("state: stdout %q stderr %q count %d", x.Stdout, x.Stderr, x.ExecutionCount)
	}
	x = run(t, c, "ls /nonexistent", 30*time.Second)
	if x.Error == nil || x.Error.Name != interp.ErrorExitCode || x.Error.Value != "2" || !strings.Contains(x.Stderr, "No such file") {
		t.Errorf("a failing command: %s, stderr %q", events(x), x.Stderr)
	}
	if x := run(t, c, "echo 'unbalanced", 30*time.Second); errorName(x) != interp.ErrorExitCode {
		t.Errorf("a syntax error: %s", events(x))
	}
	// the code's stdin is empty; "!" is no history expansion
	if x := ok(t, run(t, c, "read -r line; echo \"got [$line] !\"", 30*time.Second)); x.Stdout != "got [] !\n" {
		t.Errorf("stdin: %q", x.Stdout)
	}
	for _, code := range []string{"sleep 60; echo not here", "while :; do :; done"} {
		x = run(t, c, code, time.Second)
		if !x.Interrupted || x.Restarted || x.Error == nil || x.Error.Value != "130" || strings.Contains(x.Stdout, "not here") {
			t.Errorf("%q interrupted: %s, stdout %q", code, events(x), x.Stdout)
		}
	}
	if x := ok(t, run(t, c, "echo $x", 30*time.Second)); x.Stdout != "41\n" {
		t.Errorf("after the interrupts: %q", x.Stdout)
	}
	// a background job lives on; what it prints comes with a later call
	ok(t, run(t, c, "(sleep 0.3; echo late) & sleep 300 & bg=$!", 30*time.Second))
	time.Sleep(time.Second)
	if x := ok(t, run(t, c, "kill -0 $bg && echo alive", 30*time.Second)); x.Stdout != "late\nalive\n" {
		t.Errorf("background jobs: %q", x.Stdout)
	}
	x = run(t, c, "exit 3", 30*time.Second)
	if !x.Restarted || errorName(x) != interp.ErrorDied || !strings.Contains(x.Error.Value, "bash exited with status 3") {
		t.Errorf("exit: %s", events(x))
	}
	if x := ok(t, run(t, c, "echo \"[$x]\"", 30*time.Second)); x.Stdout != "[]\n" || x.ExecutionCount != 1 {
		t.Errorf("after exit: %q count %d", x.Stdout, x.ExecutionCount)
	}
}

func TestBashForkBomb(t *testing.T) {
	inst := newSandbox(t, sandbox.HostImage(), func(p *sandbox.Policy) { p.Limits.Pids = 64 })
	c := start(t, inst, interp.Options{Language: interp.Bash})
	x := run(t, c, "bomb() { bomb | bomb & }; bomb; sleep 60", 2*time.Second)
	if !x.Interrupted && !x.Restarted {
		t.Errorf("the bomb's call: %s", events(x))
	}
	// a command that must fork works again
	if x := ok(t, run(t, c, "/bin/echo forked", 30*time.Second)); x.Stdout != "forked\n" {
		t.Errorf("after the bomb: %s %q %q", events(x), x.Stdout, x.Stderr)
	}
}

func TestJavaScript(t *testing.T) {
	// the host's node (20 here) and the python image's (Debian's 18)
	for _, img := range []struct {
		name  string
		image func(testing.TB) sandbox.Image
	}{{"host", func(testing.TB) sandbox.Image { return sandbox.HostImage() }}, {"python-image", pythonImage}} {
		t.Run(img.name, func(t *testing.T) { testJavaScript(t, newSandbox(t, img.image(t), nil)) })
	}
}

func testJavaScript(t *testing.T, inst sandbox.Instance) {
	c := start(t, inst, interp.Options{Language: interp.JavaScript})
	t.Logf("runner: %s", c.Runner())
	if !strings.HasPrefix(c.Runner(), "node v") {
		t.Errorf("runner %q", c.Runner())
	}
	ok(t, run(t, c, "const base = 40; var seen = []; function inc(v) { return v + 1 }; class P { constructor(x) { this.x = x } }", 30*time.Second))
	x := ok(t, run(t, c, "console.log('base is', base); process.stdout.write('raw\\n'); console.error('err'); inc(base) + 1", 30*time.Second))
	if text(x) != "42" || x.Stdout != "base is 40\nraw\n" || x.Stderr != "err\n" || x.ExecutionCount != 2 {
		t.Errorf("state: result %q stdout %q stderr %q count %d", text(x), x.Stdout, x.Stderr, x.ExecutionCount)
	}
	x = ok(t, run(t, c, "({ name: 'p', list: [1, 2], nested: { ok: true } })", 30*time.Second))
	if r := x.Results[0]; r[interp.MIMEJSON] != `{"name":"p","list":[1,2],"nested":{"ok":true}}` || !strings.Contains(r[interp.MIMEText], "name: 'p'") {
		t.Errorf("an object: %v", r)
	}
	if x := ok(t, run(t, c, "new P(3) instanceof P && [1] instanceof Array", 30*time.Second)); text(x) != "true" {
		t.Errorf("classes and built-ins: %q", text(x))
	}
	x = ok(t, run(t, c, "const got = await new Promise((r) => setTimeout(() => r(5), 20)); got * 2", 30*time.Second))
	if text(x) != "10" {
		t.Errorf("top-level await: %s", events(x))
	}
	if x := ok(t, run(t, c, "got + 1", 30*time.Second)); text(x) != "6" {
		t.Errorf("a const declared with await, later: %s", events(x))
	}
	x = run(t, c, "function boom() { throw new TypeError('bad thing') }\nboom()", 30*time.Second)
	if x.Error == nil || x.Error.Name != "TypeError" || x.Error.Value != "bad thing" || !strings.Contains(strings.Join(x.Error.Traceback, "\n"), "boom") {
		t.Errorf("an error: %+v", x.Error)
	}
	if x := ok(t, run(t, c, "require('child_process').execSync('echo from a child', { stdio: 'inherit' }); undefined", 30*time.Second)); x.Stdout != "from a child\n" {
		t.Errorf("a child's output: %q", x.Stdout)
	}
	for _, code := range []string{"while (true) {}", "await new Promise(() => {})"} {
		x = run(t, c, code, time.Second)
		if !x.Interrupted || x.Restarted || errorName(x) != "Interrupted" {
			t.Errorf("%q: %s", code, events(x))
		}
	}
	if x := ok(t, run(t, c, "seen.push(1); base", 30*time.Second)); text(x) != "40" {
		t.Errorf("after the interrupts: %s", events(x))
	}
	x = run(t, c, "process.exit(4)", 30*time.Second)
	if !x.Restarted || errorName(x) != interp.ErrorDied || !strings.Contains(x.Error.Value, "node exited with status 4") {
		t.Errorf("exit: %s", events(x))
	}
	if x := ok(t, run(t, c, "typeof base", 30*time.Second)); text(x) != "'undefined'" {
		t.Errorf("after exit: %s", events(x))
	}
}

func TestSeveralContexts(t *testing.T) {
	inst := hostSandbox(t)
	langs := []string{interp.Python, interp.Python, interp.Bash, interp.JavaScript}
	set := map[string]string{interp.Python: "v = %d", interp.Bash: "v=%d", interp.JavaScript: "var v = %d"}
	get := map[string]string{interp.Python: "print(v)", interp.Bash: "echo $v", interp.JavaScript: "console.log(v)"}
	ctxs := make([]*interp.Context, len(langs))
	for i, l := range langs {
		ctxs[i] = start(t, inst, interp.Options{Name: fmt.Sprintf("%s-%d", l, i), Language: l})
	}
	var wg sync.WaitGroup
	for round := 0; round < 3; round++ {
		for i, c := range ctxs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := langs[i]
				want := i*10 + round
				if _, err := c.Run(context.Background(), fmt.Sprintf(set[l], want), 30*time.Second, nil); err != nil {
					t.Error(err)
					return
				}
				x, err := c.Run(context.Background(), get[l], 30*time.Second, nil)
				if err != nil || x.Stdout != fmt.Sprintf("%d\n", want) {
					t.Errorf("context %s: %q %v, want %d", c.ID(), x.Stdout, err, want)
				}
			}()
		}
		wg.Wait()
	}
}
