package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// isolationBodies are the bodies tenant B sends on A's routes: each would
// change A's session if it reached it.
var isolationBodies = map[string]string{
	"setSessionTTL": `{"ttl_seconds":1}`,
	"putFile":       "overwritten by bob",
	"exec":          `{"cmd":["sh","-c","echo bob > /workspace/output/bob.txt; kill -9 -1"]}`,
	"signalProcess": `{"signal":"KILL"}`,
	"writeStdin":    "bob\n",
	"runCode":       `{"code":"open('/workspace/output/bob.txt','w').write('bob')"}`,
	"createContext": `{}`,
}

// TestTenantIsolation: tenant B gets 404 for tenant A's session ids on
// every route that takes one, as listed by the server's own OpenAPI
// document, and none of those calls changes anything of A's: its file,
// its process, its TTL, its output folder.
func TestTenantIsolation(t *testing.T) {
	s := startServer(t, serverConfig{})
	a := s.client(t, keyA, client.Options{})
	cx := ctx(t, 2*time.Minute)
	sess, err := a.CreateSession(cx, api.CreateSession{TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteFile(cx, sess.ID, "input/data.csv", []byte("alice's\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteFile(cx, sess.ID, "output/report.csv", []byte("a,b\n")); err != nil {
		t.Fatal(err)
	}
	proc, err := a.StartProcess(cx, sess.ID, api.Exec{Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	before, err := a.GetSession(cx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	docBytes, err := a.OpenAPI(cx)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(docBytes, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for p, item := range doc.Paths {
		if !strings.Contains(p, "{id}") {
			continue
		}
		for m, op := range item {
			ops = append(ops, strings.ToUpper(m)+" "+p+" "+op.OperationID)
		}
	}
	// deleting the session goes last, so that a leak there cannot hide
	// the others
	sort.Slice(ops, func(i, j int) bool {
		di, dj := strings.HasSuffix(ops[i], " deleteSession"), strings.HasSuffix(ops[j], " deleteSession")
		if di != dj {
			return dj
		}
		return ops[i] < ops[j]
	})
	if len(ops) < 12 {
		t.Fatalf("%d session routes in the document: %v", len(ops), ops)
	}
	fill := regexp.MustCompile(`\{(id|pid|path|context)\}`)
	for _, op := range ops {
		f := strings.Fields(op)
		method, path, id := f[0], f[1], f[2]
		url := s.url + fill.ReplaceAllStringFunc(path, func(w string) string {
			switch w {
			case "{id}":
				return sess.ID
			case "{pid}":
				return proc.ID
			case "{path}":
				return "input/data.csv"
			}
			return "default"
		})
		body, ok := isolationBodies[id]
		if !ok && method == "POST" {
			body = "{}"
		}
		req, _ := http.NewRequestWithContext(cx, method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyB)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 404 || e.Code != api.CodeNotFound || strings.Contains(string(b), "data.csv") {
			t.Errorf("bob's %s on alice's session: %d %s, want 404 not_found saying nothing of hers", op, resp.StatusCode, b)
		}
	}
	// the same through the SDK, for a few: ErrNotFound
	bob := s.client(t, keyB, client.Options{})
	if _, err := bob.GetSession(cx, sess.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("bob's GetSession: %v", err)
	}
	if list, err := bob.ListSessions(cx); err != nil || len(list) != 0 {
		t.Errorf("bob's list: %+v %v, want none of alice's", list, err)
	}
	// nothing of alice's changed
	after, err := a.GetSession(cx, sess.ID)
	if err != nil {
		t.Fatalf("alice's session after bob's calls: %v", err)
	}
	if !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Errorf("alice's TTL moved: %v, was %v", after.ExpiresAt, before.ExpiresAt)
	}
	if b, _, err := a.ReadFile(cx, sess.ID, "input/data.csv", 0); err != nil || string(b) != "alice's\n" {
		t.Errorf("alice's file: %q %v", b, err)
	}
	if p, err := a.GetProcess(cx, sess.ID, proc.ID); err != nil || !p.Running {
		t.Errorf("alice's process: %+v %v, want still running", p, err)
	}
	if files, err := a.ListFiles(cx, sess.ID, "output"); err != nil || len(files) != 1 || files[0].Name != "report.csv" {
		t.Errorf("alice's output folder: %+v %v", files, err)
	}
	if err := a.CloseStdin(cx, sess.ID, proc.ID); err != nil {
		t.Errorf("alice's stdin: %v", err)
	}
	if p, err := a.WaitProcess(cx, sess.ID, proc.ID, 20*time.Second); err != nil || p.Running || p.Result.Stdout != "" || p.Result.ExitCode != 0 {
		t.Errorf("alice's process read something, or did not end: %+v %v", p, err)
	}
}

// TestGracefulShutdown: on SIGTERM new requests get 503 while running
// calls finish; then every sandbox is destroyed and the server exits 0.
func TestGracefulShutdown(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{Retries: -1})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartProcess(cx, sess.ID, api.Exec{Cmd: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	inits := sandboxInitPids(s.pid)
	if len(inits) != 1 {
		t.Fatalf("%d sandboxes, want 1", len(inits))
	}
	type outcome struct {
		res string
		err error
	}
	running := make(chan outcome, 1)
	started := make(chan struct{})
	go func() {
		r, err := c.ExecStreaming(cx, sess.ID, sh("echo started; sleep 2; echo finished"), client.Output{Stdout: func(d string) {
			if strings.Contains(d, "started") {
				close(started)
			}
		}})
		running <- outcome{r.Stdout, err}
	}()
	<-started
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var got503 bool
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline) && !got503; time.Sleep(50 * time.Millisecond) {
		_, err := c.ListSessions(cx)
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == 503 && errors.Is(err, client.ErrUnavailable) {
			got503 = true
		} else if err != nil && !errors.As(err, &ae) {
			t.Fatalf("a request during the drain: %v, want a 503, not a refused connection", err)
		}
	}
	if !got503 {
		t.Error("no 503 during the drain")
	}
	o := <-running
	if o.err != nil || o.res != "started\nfinished\n" {
		t.Errorf("the call running at SIGTERM: %q %v, want it to finish", o.res, o.err)
	}
	select {
	case <-s.waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit within 30 s of SIGTERM")
	}
	if s.err != nil {
		t.Errorf("exit: %v, want 0\n%s", s.err, s.logTail())
	}
	if alive := stillAlive(inits); len(alive) > 0 {
		t.Errorf("sandbox inits alive after the exit: %v", alive)
	}
	if len(grepLog(s.log(), `"msg":"session ended"`)) != 1 {
		t.Errorf("the log does not say the session ended:\n%s", s.logTail())
	}
}

// sandboxInitPids lists the pids of the sandbox inits of server pid, with
// their start times, so that stillAlive is not fooled by a reused pid.
func sandboxInitPids(pid int) map[string]string {
	out := map[string]string{}
	for _, line := range leakcheck.Inits(pid) {
		p := strings.TrimSuffix(strings.Fields(line)[1], ":")
		out[p] = startTime(p)
	}
	return out
}

// startTime reads field 22 of /proc/PID/stat; "" when pid is gone.
func startTime(pid string) string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// stillAlive lists the processes of pids that still run (not zombies).
func stillAlive(pids map[string]string) []string {
	var out []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out = out[:0]
		for p, st := range pids {
			b, _ := os.ReadFile(filepath.Join("/proc", p, "stat"))
			if st != "" && startTime(p) == st && !bytes.Contains(b, []byte(") Z ")) {
				out = append(out, p)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
	}
}

// TestKillRestart: a server killed with SIGKILL mid-run takes its
// sandboxes with it, and the next server removes what they left (cgroups,
// registry entries); clients get a clear 404 for the sessions that died.
func TestKillRestart(t *testing.T) {
	dead := startServer(t, serverConfig{})
	c := dead.client(t, keyA, client.Options{Retries: -1})
	cx := ctx(t, 2*time.Minute)
	var ids []string
	for i := 0; i < 2; i++ {
		sess, err := c.CreateSession(cx, api.CreateSession{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	if _, err := c.StartProcess(cx, ids[0], api.Exec{Cmd: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(cx, ids[1], "tmp/data", bytes.Repeat([]byte("x"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	midRun := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		_, err := c.ExecStreaming(cx, ids[1], sh("echo started; sleep 600"), client.Output{Stdout: func(string) { close(started) }})
		midRun <- err
	}()
	<-started
	inits := sandboxInitPids(dead.pid)
	if len(inits) != 2 {
		t.Fatalf("%d sandboxes, want 2", len(inits))
	}
	if left := leftovers(dead.pid, ""); len(left) < 4 {
		t.Fatalf("the live server's sandboxes show as %v: the scan finds nothing to find", left)
	}
	dead.kill()
	select {
	case err := <-midRun:
		if err == nil {
			t.Error("the stream of a killed server ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Error("the stream of a killed server did not end within 10 s")
	}
	if alive := stillAlive(inits); len(alive) > 0 {
		t.Errorf("sandbox inits alive after the server was killed: %v", alive)
	}
	next := startServer(t, serverConfig{})
	// the removal runs beside the server's first sessions, and logs once
	// it is done
	for end := time.Now().Add(time.Minute); len(grepLog(next.log(), "removed what a dead airlock left")) == 0; {
		if time.Now().After(end) {
			t.Fatalf("the new server's log does not say it removed anything within a minute:\n%s", next.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left := leftovers(dead.pid, dead.tmp); len(left) > 0 {
		t.Errorf("after the restart, the killed server's traces are still there:\n  %s", strings.Join(left, "\n  "))
	}
	nc := next.client(t, keyA, client.Options{})
	for _, id := range ids {
		_, err := nc.GetSession(cx, id)
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.Status != 404 && ae.Status != 410) || !strings.Contains(ae.Message, id) {
			t.Errorf("a session of the killed server: %v, want a 404 or 410 naming it", err)
		}
		if _, err := nc.Exec(cx, id, sh("true")); !errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrEnded) {
			t.Errorf("exec in a session of the killed server: %v", err)
		}
	}
	if _, err := nc.CreateSession(cx, api.CreateSession{}); err != nil {
		t.Errorf("the new server: %v", err)
	}
}
