package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// sh is a command line run by sh -c.
func sh(script string) api.Exec { return api.Exec{Cmd: []string{"sh", "-c", script}} }

// TestFilesPersist: a session's files persist across execs; downloads
// carry the filter's verdict; a rejected file is a 403 with an api.Error.
func TestFilesPersist(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{Metadata: map[string]string{"test": t.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(cx, sess.ID, "input/data.csv", []byte("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(cx, sess.ID, sh("echo written >> /workspace/input/data.csv")); err != nil || res.ExitCode == 0 {
		t.Errorf("writing an input: %+v %v, want a failure (input is read-only)", res, err)
	}
	for i, script := range []string{
		"cat /workspace/input/data.csv > /tmp/step.csv && echo '=1+1,3' >> /tmp/step.csv",
		"cat /tmp/step.csv > /workspace/output/out.csv && printf '\\177ELF' > /workspace/output/tool.bin && wc -l < /tmp/step.csv",
	} {
		res, err := c.Exec(cx, sess.ID, sh(script))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("step %d: %+v %v", i, res, err)
		}
		if i == 1 && strings.TrimSpace(res.Stdout) != "3" {
			t.Errorf("the second exec saw %q lines of the first's file, want 3", res.Stdout)
		}
	}
	b, a, err := c.ReadFile(cx, sess.ID, "output/out.csv", 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Verdict != sandbox.VerdictSanitized || !strings.Contains(string(b), "'=1+1") {
		t.Errorf("download: verdict %q (%s), body %q; want sanitized with the formula neutralised", a.Verdict, a.Reason, b)
	}
	_, err = c.GetFile(cx, sess.ID, "output/tool.bin")
	var ae *api.Error
	if !errors.Is(err, client.ErrRejected) || !errors.As(err, &ae) || ae.Status != 403 {
		t.Errorf("download of an ELF file: %v, want a 403 *api.Error matching ErrRejected", err)
	}
	// the same, in plain HTTP: the verdict headers ride on the 403
	req, _ := http.NewRequest("GET", s.url+"/v1/sessions/"+sess.ID+"/files/output/tool.bin", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body api.Error
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(api.HeaderVerdict) != sandbox.VerdictRejected || resp.Header.Get(api.HeaderReason) == "" || body.Code != api.CodeForbidden {
		t.Errorf("plain GET of a rejected file: %d %v %+v", resp.StatusCode, resp.Header, body)
	}
	list, err := c.ListFiles(cx, sess.ID, "output")
	if err != nil || len(list) != 2 {
		t.Errorf("listing output: %+v %v", list, err)
	}
	arts, err := c.Artifacts(cx, sess.ID)
	if err != nil || len(arts) != 2 {
		t.Errorf("artifacts: %+v %v", arts, err)
	}
	if err := c.DeleteFile(cx, sess.ID, "output/tool.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetFile(cx, sess.ID, "output/tool.bin"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a deleted file: %v, want ErrNotFound", err)
	}
	if err := c.DeleteSession(cx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(cx, sess.ID); !errors.Is(err, client.ErrEnded) {
		t.Errorf("a deleted session: %v, want ErrEnded", err)
	}
}

// TestStreamFirstLine: a stream delivers output as it happens: the first
// line of a command that prints, sleeps 3 s and prints arrives well
// before its end, through the SDK's iterator, its callbacks, and plain
// HTTP.
func TestStreamFirstLine(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	req := sh("echo first; sleep 3; echo second")
	check := func(how string, first, end time.Duration) {
		t.Helper()
		if first > 1500*time.Millisecond || end-first < 2*time.Second {
			t.Errorf("%s: the first line after %v, the end after %v: the stream waited for the command", how, first, end)
		}
	}
	// the iterator
	start := time.Now()
	st, err := c.ExecStream(cx, sess.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	var res *sandbox.Result
	for ev, err := range st.All() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == api.EventStdout && first == 0 {
			first = time.Since(start)
		}
		if ev.Type == api.EventResult {
			res = ev.Result
		}
	}
	if res == nil || res.Stdout != "first\nsecond\n" {
		t.Fatalf("iterator: result %+v", res)
	}
	check("iterator", first, time.Since(start))
	// the callbacks
	start, first = time.Now(), 0
	var mu sync.Mutex
	var out strings.Builder
	r, err := c.ExecStreaming(cx, sess.ID, req, client.Output{Stdout: func(d string) {
		mu.Lock()
		defer mu.Unlock()
		if first == 0 {
			first = time.Since(start)
		}
		out.WriteString(d)
	}})
	if err != nil || r.ExitCode != 0 || out.String() != "first\nsecond\n" {
		t.Fatalf("callbacks: %+v %v %q", r, err, out.String())
	}
	check("callbacks", first, time.Since(start))
	// plain HTTP, line by line
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", s.url+"/v1/sessions/"+sess.ID+"/exec", bytes.NewReader(b))
	hr.Header.Set("Authorization", "Bearer "+keyA)
	hr.Header.Set("Accept", api.ContentNDJSON)
	start, first = time.Now(), 0
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var types []string
	for sc.Scan() {
		var ev api.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if ev.Type == api.EventStdout && first == 0 {
			first = time.Since(start)
		}
		types = append(types, ev.Type)
	}
	if len(types) < 3 || types[len(types)-1] != api.EventResult {
		t.Errorf("plain HTTP: events %v", types)
	}
	check("plain HTTP", first, time.Since(start))
}

// TestBackgroundProcess: a background process takes stdin while it runs
// and ends on a signal; waits return when it ends.
func TestBackgroundProcess(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.StartProcess(cx, sess.ID, sh(`while read l; do echo "got:$l"; echo "$l" >> /tmp/lines; done; echo eof`))
	if err != nil || !p.Running {
		t.Fatalf("start: %+v %v", p, err)
	}
	for _, l := range []string{"one\n", "two\n"} {
		if err := c.WriteStdin(cx, sess.ID, p.ID, strings.NewReader(l)); err != nil {
			t.Fatal(err)
		}
	}
	// the process reads while it runs: the lines land before stdin closes
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Exec(cx, sess.ID, sh("cat /tmp/lines 2>/dev/null"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Stdout == "one\ntwo\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process has not read its stdin: %q", res.Stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := c.GetProcess(cx, sess.ID, p.ID); err != nil || !got.Running {
		t.Errorf("before eof: %+v %v, want running", got, err)
	}
	if err := c.CloseStdin(cx, sess.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitProcess(cx, sess.ID, p.ID, 20*time.Second)
	if err != nil || done.Running || done.Result == nil || done.Result.Stdout != "got:one\ngot:two\neof\n" {
		t.Fatalf("after eof: %+v %v", done, err)
	}
	if err := c.WriteStdin(cx, sess.ID, p.ID, strings.NewReader("late\n")); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stdin of an ended process: %v, want ErrConflict", err)
	}
	// a signal
	q, err := c.StartProcess(cx, sess.ID, sh("trap 'echo term; exit 3' TERM; while :; do sleep 0.05; done"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := c.SignalProcess(cx, sess.ID, q.ID, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	ended, err := c.WaitProcess(cx, sess.ID, q.ID, 20*time.Second)
	if err != nil || ended.Running || ended.Result == nil || ended.Result.ExitCode != 3 || ended.Result.Stdout != "term\n" {
		t.Fatalf("after SIGTERM: %+v %v", ended, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the wait returned %v after the signal", d)
	}
	r, err := c.StartProcess(cx, sess.ID, api.Exec{Cmd: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignalProcess(cx, sess.ID, r.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	killed, err := c.WaitProcess(cx, sess.ID, r.ID, 20*time.Second)
	if err != nil || killed.Result == nil || killed.Result.Signal != "SIGKILL" {
		t.Errorf("after KILL: %+v %v", killed, err)
	}
	procs, err := c.ListProcesses(cx, sess.ID)
	if err != nil || len(procs) != 3 {
		t.Errorf("processes: %d %v, want 3", len(procs), err)
	}
	// a wait that times out answers the running process
	w, err := c.StartProcess(cx, sess.ID, api.Exec{Cmd: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	got, err := c.WaitProcess(cx, sess.ID, w.ID, 500*time.Millisecond)
	if err != nil || !got.Running || time.Since(start) < 400*time.Millisecond {
		t.Errorf("a short wait: %+v %v after %v", got, err, time.Since(start))
	}
}

// TestAuth: no key and a wrong key are 401, a key in the URL a 400, and
// none of them reaches a session.
func TestAuth(t *testing.T) {
	s := startServer(t, serverConfig{})
	cx := ctx(t, time.Minute)
	for _, c := range []struct {
		name, key, query string
		status           int
	}{
		{"no key", "", "", 401},
		{"wrong key", "nobody-key-0123456789abcdef", "", 401},
		{"key in the URL", "", "?api_key=" + keyA, 400},
		{"key in the URL beside the header", keyA, "?token=" + keyA, 400},
	} {
		req, _ := http.NewRequestWithContext(cx, "GET", s.url+"/v1/sessions"+c.query, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || err != nil || e.Code == "" {
			t.Errorf("%s: %d %+v (%v), want %d with an error body", c.name, resp.StatusCode, e, err, c.status)
		}
		if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
	bad := s.client(t, "nobody-key-0123456789abcdef", client.Options{})
	if _, err := bad.ListSessions(cx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("the SDK with a wrong key: %v, want ErrUnauthorized", err)
	}
	if _, err := client.New(s.url+"?api_key="+keyA, client.Options{}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("the SDK with a key in the URL: %v, want ErrInvalid", err)
	}
}

// TestHugeBody: a JSON body over the cap is a 413, and so is a file over
// the sandbox's disk cap.
func TestHugeBody(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	big := `{"metadata":{"k":"` + strings.Repeat("x", 5<<20) + `"}}`
	req, _ := http.NewRequestWithContext(cx, "POST", s.url+"/v1/sessions", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 413 || e.Code != api.CodeTooLarge {
		t.Errorf("a 5 MiB JSON body: %d %+v, want 413 too_large", resp.StatusCode, e)
	}
	if sessions, err := c.ListSessions(cx); err != nil || len(sessions) != 0 {
		t.Errorf("sessions after a refused create: %d %v", len(sessions), err)
	}
	sess, err := c.CreateSession(cx, api.CreateSession{Policy: &sandbox.Policy{Limits: sandbox.Limits{DiskBytes: 2 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PutFile(cx, sess.ID, "tmp/big", bytes.NewReader(make([]byte, 4<<20)))
	if !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("a 4 MiB file in a 2 MiB sandbox: %v, want ErrTooLarge (413)", err)
	}
}

// TestQuota: a tenant's session quota from its keys-file line answers 429
// with Retry-After, and frees up when a session ends.
func TestQuota(t *testing.T) {
	s := startServer(t, serverConfig{keys: []string{"carol carol-key-0123456789abcdef sessions=1"}})
	c := s.client(t, "carol-key-0123456789abcdef", client.Options{})
	cx := ctx(t, time.Minute)
	first, err := c.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSession(cx, api.CreateSession{})
	var ae *api.Error
	if !errors.Is(err, client.ErrLimit) || !errors.As(err, &ae) || ae.Status != 429 || ae.RetryAfter <= 0 {
		t.Fatalf("a second session over sessions=1: %v, want 429 limit with Retry-After", err)
	}
	// another tenant is not affected
	if _, err := s.client(t, keyB, client.Options{}).CreateSession(cx, api.CreateSession{}); err != nil {
		t.Errorf("bob's create while carol is at her quota: %v", err)
	}
	if err := c.DeleteSession(cx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(cx, api.CreateSession{}); err != nil {
		t.Errorf("a create after the first session ended: %v", err)
	}
}

// TestRateLimit: a key over its rate gets 429 rate_limited with
// Retry-After; the SDK waits it out when asked to, and not otherwise.
func TestRateLimit(t *testing.T) {
	s := startServer(t, serverConfig{args: []string{"--rate", "1", "--rate-burst", "3"}})
	cx := ctx(t, time.Minute)
	plain := s.client(t, keyA, client.Options{Retries: -1})
	var limited *api.Error
	for i := 0; i < 10 && limited == nil; i++ {
		_, err := plain.ListSessions(cx)
		if err != nil && !errors.As(err, &limited) {
			t.Fatal(err)
		}
	}
	if limited == nil || limited.Status != 429 || limited.Code != api.CodeRateLimited || limited.RetryAfter < time.Second {
		t.Fatalf("10 calls at a rate of 1/s with a burst of 3: %+v, want 429 rate_limited with Retry-After", limited)
	}
	// bob's key has a bucket of its own
	if _, err := s.client(t, keyB, client.Options{Retries: -1}).ListSessions(cx); err != nil {
		t.Errorf("bob while alice is limited: %v", err)
	}
	patient := s.client(t, keyA, client.Options{RetryRateLimited: true, Retries: 5})
	start := time.Now()
	for i := 0; i < 3; i++ {
		if _, err := patient.ListSessions(cx); err != nil {
			t.Fatalf("with RetryRateLimited: %v", err)
		}
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("3 calls over the rate took %v: the waits were not waited", time.Since(start))
	}
}

// TestTTLExpiry: a session created with ttl_seconds 2 ends by itself;
// later requests get 410 and its sandbox is gone.
func TestTTLExpiry(t *testing.T) {
	s := startServer(t, serverConfig{})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{TTLSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leakcheck.Inits(s.pid)); n != 1 {
		t.Errorf("%d sandboxes while the session lives, want 1", n)
	}
	if _, err := c.Exec(cx, sess.ID, sh("true")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	_, err = c.Exec(cx, sess.ID, sh("true"))
	var ae *api.Error
	if !errors.Is(err, client.ErrEnded) || !errors.As(err, &ae) || ae.Status != 410 || !strings.Contains(ae.Message, "expired") {
		t.Errorf("exec after the TTL: %v, want 410 saying it expired", err)
	}
	if _, err := c.GetSession(cx, sess.ID); !errors.Is(err, client.ErrEnded) {
		t.Errorf("get after the TTL: %v, want ErrEnded", err)
	}
	if n := len(leakcheck.Inits(s.pid)); n != 0 {
		t.Errorf("%d sandboxes after the TTL, want 0", n)
	}
	// a TTL made longer keeps a session past its first one
	long, err := c.CreateSession(cx, api.CreateSession{TTLSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetTTL(cx, long.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := c.GetSession(cx, long.ID); err != nil {
		t.Errorf("a session whose TTL was extended: %v", err)
	}
}

// TestSlowLoris: clients that send their headers or bodies a byte at a
// time do not hold up others, which answer fast meanwhile, and are cut
// off once their time is up.
func TestSlowLoris(t *testing.T) {
	s := startServer(t, serverConfig{args: []string{"--header-timeout", "4s", "--body-timeout", "4s", "--rate", "10000"}})
	c := s.client(t, keyA, client.Options{Retries: -1})
	cx := ctx(t, time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(s.url, "http://")
	type outcome struct {
		what   string
		cut    time.Duration
		answer string
	}
	results := make(chan outcome, 8)
	slow := func(what, head, body string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			results <- outcome{what: what, answer: err.Error()}
			return
		}
		defer conn.Close()
		start := time.Now()
		// the reader notices when the server ends the connection
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(conn)
			got <- string(b)
		}()
		send := func(s string, every time.Duration) bool {
			for i := 0; i < len(s); i++ {
				if _, err := conn.Write([]byte{s[i]}); err != nil {
					return false
				}
				select {
				case <-time.After(every):
				case ans := <-got:
					got <- ans
					return false
				}
			}
			return true
		}
		if body == "" {
			send(head, 100*time.Millisecond)
		} else if send(head, 0) {
			send(body, 200*time.Millisecond)
		}
		select {
		case ans := <-got:
			results <- outcome{what: what, cut: time.Since(start), answer: ans}
		case <-time.After(20 * time.Second):
			results <- outcome{what: what, cut: time.Since(start), answer: "still open after 20s"}
		}
	}
	body := `{"cmd":["sh","-c","echo never"],"timeout_seconds":5,"env":{"A":"` + strings.Repeat("b", 200) + `"}}`
	for i := 0; i < 3; i++ {
		go slow("headers", "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+keyA+"\r\nX-Slow: "+strings.Repeat("z", 200)+"\r\n\r\n", "")
		go slow("body", "POST /v1/sessions/"+sess.ID+"/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+keyA+
			"\r\nContent-Type: application/json\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n", body)
	}
	// meanwhile, others are served fast
	time.Sleep(300 * time.Millisecond)
	var worst time.Duration
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		start := time.Now()
		if _, err := c.Exec(cx, sess.ID, sh("true")); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	// a server the slow clients held up would answer only once they are
	// cut, after 4 s; a loaded host may make an exec slow, not that slow
	if worst > 3*time.Second {
		t.Errorf("an exec took %v while slow clients were connected: they held it up", worst)
	}
	for i := 0; i < 6; i++ {
		o := <-results
		if o.cut < 3*time.Second || o.cut > 10*time.Second {
			t.Errorf("a slow %s client: cut after %v (%q), want within a few seconds of the 4s timeout", o.what, o.cut, o.answer)
		}
		if o.what == "body" && !strings.Contains(o.answer, "408") {
			t.Errorf("a slow body: answered %q, want a 408", o.answer)
		}
	}
	res, err := c.Exec(cx, sess.ID, sh("cat /tmp/never 2>/dev/null; echo ok"))
	if err != nil || res.Stdout != "ok\n" {
		t.Errorf("after the slow clients: %+v %v", res, err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
