package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/backend/kubernetes"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/internal/testpg"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replicaEnv, set, makes the test binary an airlock server replica over
// the cluster (see serveReplica), named by the variable's value.
const replicaEnv = "AIRLOCK_K8S_TEST_REPLICA"

// auditEnv, with replicaEnv, is the audit database's URL of a replica
// that runs as a process of its own.
const auditEnv = "AIRLOCK_K8S_TEST_AUDIT"

// newReplica is what airlock serve runs: a session Manager over a
// kubernetes backend named name, with the audit log in the PostgreSQL
// database at auditDB that the replicas share, and the HTTP API over
// both, listening on loopback. It returns the server's URL and a stop
// function.
func newReplica(name, auditDB string) (string, func(), error) {
	store, err := testimage.Find()
	if err != nil {
		return "", nil, err
	}
	log, err := audit.Open(context.Background(), auditDB, audit.Options{})
	if err != nil {
		return "", nil, err
	}
	opts := options()
	opts.Replica = name
	be := kubernetes.New(opts)
	m, err := session.New(context.Background(), session.Options{Backends: map[string]sandbox.Backend{"kubernetes": be}, Images: store,
		Observer: audit.NewRecorder(log, audit.RecorderOptions{})})
	if err != nil {
		log.Close()
		return "", nil, err
	}
	srv, err := server.New(server.Options{Manager: m, Audit: log})
	if err == nil {
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
			hs := &http.Server{Handler: srv}
			go func() { _ = hs.Serve(ln) }()
			stop := func() {
				_ = hs.Close()
				_ = m.Close(context.Background())
				_ = log.Close()
			}
			return "http://" + ln.Addr().String(), stop, nil
		}
	}
	_ = m.Close(context.Background())
	_ = log.Close()
	return "", nil, err
}

// serveReplica runs a replica as this whole process and prints its URL;
// it serves until it is killed.
func serveReplica(name string) int {
	url, _, err := newReplica(name, os.Getenv(auditEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(url)
	select {}
}

// startReplica starts a replica in this process, stopped when t ends.
func startReplica(t *testing.T, name, auditDB string) string {
	t.Helper()
	newBackend(t, options()) // skips without a cluster
	url, stop, err := newReplica(name, auditDB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// call makes one API request and decodes a JSON answer into out (when
// not nil); it returns the status.
func call(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := body.(string); !ok && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if s, ok := out.(*string); ok {
			*s = string(b)
		} else if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode
}

// execVia runs a command in session id through the replica at url.
func execVia(t *testing.T, url, id string, cmd ...string) sandbox.Result {
	t.Helper()
	var res sandbox.Result
	if st := call(t, "POST", url+"/v1/sessions/"+id+"/exec", api.Exec{Cmd: cmd}, &res); st != http.StatusOK {
		t.Fatalf("exec %q through %s: status %d", cmd, url, st)
	}
	return res
}

// podGone waits until sandbox id's Pod is gone.
func podGone(t *testing.T, id string) {
	t.Helper()
	c, ns := client()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), "airlock-"+id, metav1.GetOptions{})
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Pod of %s is still there", id)
		}
	}
}

// TestTwoReplicas: a session created through one replica is used (files
// and commands) and destroyed through another, which finds it from its
// Pod alone; the first then answers that it ended.
func TestTwoReplicas(t *testing.T) {
	db := testpg.Start(t).NewDatabase(t)
	a := startReplica(t, replica+"-a", db)
	b := startReplica(t, replica+"-b", db)
	var s api.Session
	if st := call(t, "POST", a+"/v1/sessions", api.CreateSession{Backend: "kubernetes", Image: "python",
		Metadata: map[string]string{"step": "1"}}, &s); st != http.StatusCreated {
		t.Fatalf("create through A: %d", st)
	}
	if st := call(t, "PUT", b+"/v1/sessions/"+s.ID+"/files/input/data.txt", "from B", nil); st >= 300 {
		t.Fatalf("put through B: %d", st)
	}
	if res := execVia(t, b, s.ID, "cat", "/workspace/input/data.txt"); res.Stdout != "from B" {
		t.Fatalf("cat through B: %+v", res)
	}
	if res := execVia(t, a, s.ID, "sh", "-c", "cat /workspace/input/data.txt; echo made by A > /workspace/output/r.txt"); res.Stdout != "from B" {
		t.Fatalf("cat through A: %+v", res)
	}
	var got string
	if st := call(t, "GET", b+"/v1/sessions/"+s.ID+"/files/output/r.txt", nil, &got); st != http.StatusOK || got != "made by A\n" {
		t.Fatalf("download through B: %d %q", st, got)
	}
	var info api.Session
	if st := call(t, "GET", b+"/v1/sessions/"+s.ID, nil, &info); st != http.StatusOK || info.Metadata["step"] != "1" {
		t.Fatalf("B's view of the session: %d %+v", st, info)
	}
	if st := call(t, "DELETE", b+"/v1/sessions/"+s.ID, nil, nil); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("destroy through B: %d", st)
	}
	podGone(t, s.ID)
	// one audit log: what each replica did, read through either
	fromA, fromB := auditOf(t, a, s.ID), auditOf(t, b, s.ID)
	joined := strings.Join(fromB, "\n")
	t.Logf("the session's audit records, through B:\n%s", joined)
	for _, want := range []string{"cat /workspace/input/data.txt", "echo made by A"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the shared audit log, read through B, lacks %q:\n%s", want, joined)
		}
	}
	if strings.Join(fromA, "\n") != joined {
		t.Errorf("the replicas read different audit logs:\n%s\n--\n%s", strings.Join(fromA, "\n"), joined)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := call(t, "POST", a+"/v1/sessions/"+s.ID+"/exec", api.Exec{Cmd: []string{"true"}}, nil)
		if st == http.StatusNotFound || st == http.StatusGone {
			t.Logf("A after B destroyed the session: %d", st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A still runs commands in the destroyed session: %d", st)
		}
	}
}

// TestKillReplica kills a replica (SIGKILL, a process of its own) while a
// command of a session it created runs, and goes on through another: the
// command died with the replica's exec stream, the session's files and
// state are there, and the survivor destroys it.
func TestKillReplica(t *testing.T) {
	db := testpg.Start(t).NewDatabase(t)
	b := startReplica(t, replica+"-b", db)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+replica+"-killed", auditEnv+"="+db)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// the Lease of the replica that died stays until a janitor's
		// round removes it; this test removes it at once
		c, ns := client()
		_ = c.CoordinationV1().Leases(ns).Delete(context.Background(), "airlock-replica-"+replica+"-killed", metav1.DeleteOptions{})
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the replica process did not start: %v", err)
	}
	a := strings.TrimSpace(line)
	var s api.Session
	if st := call(t, "POST", a+"/v1/sessions", api.CreateSession{Backend: "kubernetes", Image: "python"}, &s); st != http.StatusCreated {
		t.Fatalf("create through A: %d", st)
	}
	execVia(t, a, s.ID, "sh", "-c", "echo kept > /tmp/state")
	// a command through A that would run for 5 minutes
	go func() {
		body, _ := json.Marshal(api.Exec{Cmd: []string{"sh", "-c", "exec sleep 299"}, TimeoutSeconds: 600})
		resp, err := http.Post(a+"/v1/sessions/"+s.ID+"/exec", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool {
		return strings.Contains(execVia(t, b, s.ID, "ps", "-eo", "args").Stdout, "sleep 299")
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("replica A (pid %d) killed mid-command", cmd.Process.Pid)
	// its command dies with its exec stream
	waitFor(t, func() bool {
		return !strings.Contains(execVia(t, b, s.ID, "ps", "-eo", "args").Stdout, "sleep 299")
	})
	if res := execVia(t, b, s.ID, "cat", "/tmp/state"); res.Stdout != "kept\n" {
		t.Fatalf("state after A died: %+v", res)
	}
	// what A did before it died is in the log the replicas share
	if got := strings.Join(auditOf(t, b, s.ID), "\n"); !strings.Contains(got, "echo kept > /tmp/state") {
		t.Errorf("the audit log, read through B, lacks A's command:\n%s", got)
	}
	if st := call(t, "DELETE", b+"/v1/sessions/"+s.ID, nil, nil); st >= 300 {
		t.Fatalf("destroy through B: %d", st)
	}
	podGone(t, s.ID)
}

// auditOf is session id's records in the audit log, read through the
// replica at url, a "KIND WHAT" line each.
func auditOf(t *testing.T, url, id string) []string {
	t.Helper()
	var list api.AuditList
	if st := call(t, "GET", url+"/v1/audit?limit=1000", nil, &list); st != http.StatusOK {
		t.Fatalf("audit through %s: %d", url, st)
	}
	var out []string
	for _, r := range list.Records {
		if r.Session == id {
			out = append(out, r.Kind+" "+r.What)
		}
	}
	return out
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}
