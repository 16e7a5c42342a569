package audit_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/audit/audittest"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func openSQLite(t *testing.T, path string, o audit.Options) *audit.SQLite {
	t.Helper()
	s, err := audit.OpenSQLite(context.Background(), path, o)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSQLiteSuite(t *testing.T) {
	audittest.Run(t, func(t *testing.T) audit.Store {
		return openSQLite(t, filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	})
}

func TestSQLiteSuiteFsync(t *testing.T) {
	audittest.Run(t, func(t *testing.T) audit.Store {
		return openSQLite(t, filepath.Join(t.TempDir(), "audit.db"), audit.Options{Fsync: true})
	})
}

var at = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)

// TestSQLiteReopen: records outlive the Store, and ids go on increasing.
func TestSQLiteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.db")
	ctx := context.Background()
	s := openSQLite(t, path, audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Time: at, Tenant: "alice", Kind: "exec", What: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v (the log holds tenants' commands)", p, st.Mode(), err, want)
		}
	}
	s = openSQLite(t, path, audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Time: at, Tenant: "alice", Kind: "exec", What: "two"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Query(ctx, "alice", 0, 10)
	if err != nil || len(got) != 2 || got[0].What != "one" || got[1].What != "two" || got[1].ID <= got[0].ID {
		t.Errorf("after reopening: %+v, %v", got, err)
	}
}

// rawExec runs SQL on the database file with the driver alone.
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestSQLiteNewerSchema: a log that a newer airlock wrote is refused,
// saying which versions, and is left as it was.
func TestSQLiteNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s := openSQLite(t, path, audit.Options{})
	s.Close()
	rawExec(t, path, `UPDATE airlock_schema SET version = 99`)
	for _, ro := range []bool{false, true} {
		_, err := audit.OpenSQLite(context.Background(), path, audit.Options{ReadOnly: ro})
		if !errors.Is(err, audit.ErrSchema) || !strings.Contains(err.Error(), "schema version 99") || !strings.Contains(err.Error(), "up to 1") {
			t.Errorf("read-only %v: opening a schema of version 99: %v; want ErrSchema naming 99 and 1", ro, err)
		}
	}
	db, _ := sql.Open("sqlite", path)
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT version FROM airlock_schema`).Scan(&v); err != nil || v != 99 {
		t.Errorf("the refused log's version is now %d, %v; want it untouched", v, err)
	}
}

// TestSQLiteNotAnAuditLog: another program's database, or a file that is
// no database, is refused and not changed.
func TestSQLiteNotAnAuditLog(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	rawExec(t, other, `CREATE TABLE customers (name TEXT)`)
	if _, err := audit.OpenSQLite(context.Background(), other, audit.Options{}); !errors.Is(err, audit.ErrSchema) {
		t.Errorf("a database of something else: %v, want ErrSchema", err)
	}
	if _, err := audit.OpenSQLite(context.Background(), other, audit.Options{ReadOnly: true}); !errors.Is(err, audit.ErrSchema) {
		t.Errorf("a database of something else, read-only: %v, want ErrSchema", err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("not a database\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.OpenSQLite(context.Background(), text, audit.Options{}); err == nil {
		t.Error("a text file opened as an audit log")
	}
	if b, _ := os.ReadFile(text); !strings.HasPrefix(string(b), "not a database") {
		t.Error("opening a text file as an audit log changed it")
	}
}

// TestSQLiteReadOnly: a reader opens the log a server is writing, sees
// what it wrote, writes nothing, and creates no file where there is none.
func TestSQLiteReadOnly(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	missing := filepath.Join(dir, "missing.db")
	if _, err := audit.OpenSQLite(ctx, missing, audit.Options{ReadOnly: true}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("read-only open of no file: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open created %s", missing)
	}
	path := filepath.Join(dir, "audit.db")
	w := openSQLite(t, path, audit.Options{})
	r := openSQLite(t, path, audit.Options{ReadOnly: true})
	checkReader(t, w, r)
}

// checkReader: r, the log w writes opened read-only, sees each record w
// appends, and refuses to append or prune.
func checkReader(t *testing.T, w, r audit.Store) {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		if err := w.Append(ctx, api.AuditRecord{Time: at, Tenant: "alice", Kind: "exec", What: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		got, err := r.List(ctx, audit.Filter{})
		if err != nil || len(got) != i+1 {
			t.Fatalf("the reader sees %d records, %v; want %d", len(got), err, i+1)
		}
	}
	if err := r.Append(ctx, api.AuditRecord{Tenant: "alice", Kind: "exec"}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("append on a read-only log: %v, want ErrUnsupported", err)
	}
	if _, err := r.Prune(ctx, at.Add(time.Hour)); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("prune on a read-only log: %v, want ErrUnsupported", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	// postgres:// and postgresql:// go to PostgreSQL (TestPostgresOpen);
	// other stores are not built in.
	for _, u := range []string{"mysql://db.example/airlock", "sqlite://x@y/z"} {
		if _, err := audit.Open(ctx, u, audit.Options{}); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("open %s: %v, want ErrUnsupported", u, err)
		}
	}
	s, err := audit.Open(ctx, filepath.Join(t.TempDir(), "a:b ?#%.db"), audit.Options{})
	if err != nil {
		t.Fatalf("a path with URI characters: %v", err)
	}
	s.Close()
	if _, err := audit.Open(ctx, "", audit.Options{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("open of no path: %v, want ErrInvalid", err)
	}
}

func TestDefaultPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AIRLOCK_HOME": "/a", "XDG_DATA_HOME": "/x", "HOME": "/h"}, "/a/audit.db"},
		{map[string]string{"XDG_DATA_HOME": "/x", "HOME": "/h"}, "/x/airlock/audit.db"},
		{map[string]string{"HOME": "/h"}, "/h/.local/share/airlock/audit.db"},
	} {
		if got, err := audit.DefaultPath(env(c.env)); got != c.want || err != nil {
			t.Errorf("%v: %q, %v; want %q", c.env, got, err, c.want)
		}
	}
	if _, err := audit.DefaultPath(env(nil)); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("no variables: %v, want ErrUnsupported", err)
	}
}

// crashChildEnv names the database a crash test's child writes to.
const crashChildEnv = "AIRLOCK_AUDIT_CRASH_CHILD"

// TestSQLiteCrash: a process appending from several goroutines is killed
// with SIGKILL mid-stream; on reopening, every record whose Append had
// returned (the child printed its name after) is there, and the database
// is intact.
func TestSQLiteCrash(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "audit.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	appended := map[string]bool{}
	sc := bufio.NewScanner(out)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(2 * time.Minute)
	for len(appended) < 300 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child stopped after %d records", len(appended))
			}
			if name, ok := strings.CutPrefix(l, "appended "); ok {
				appended[name] = true
			}
		case <-deadline:
			t.Fatalf("the child appended only %d records in 2 minutes", len(appended))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// What the child printed before it died was appended too.
	for l := range lines {
		if name, ok := strings.CutPrefix(l, "appended "); ok {
			appended[name] = true
		}
	}
	err = cmd.Wait()
	killed = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not by SIGKILL", err)
	}
	s := openSQLite(t, path, audit.Options{})
	got := listAll(t, s)
	stored := map[string]bool{}
	for _, r := range got {
		stored[r.What] = true
	}
	missing := 0
	for name := range appended {
		if !stored[name] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d records whose Append returned are not in the log after SIGKILL", missing, len(appended))
	}
	if len(got) < len(appended) {
		t.Errorf("%d records stored, fewer than the %d appended", len(got), len(appended))
	}
	s.Close()
	db, _ := sql.Open("sqlite", path)
	defer db.Close()
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity check after SIGKILL: %q, %v", check, err)
	}
}

// listAll pages through every record of s.
func listAll(t *testing.T, s audit.Store) []api.AuditRecord {
	t.Helper()
	var all []api.AuditRecord
	for {
		f := audit.Filter{Limit: audit.MaxLimit}
		if len(all) > 0 {
			f.After = all[len(all)-1].ID
		}
		page, err := s.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			return all
		}
	}
}

// crashChild appends from four goroutines for ever, printing the name of
// each record once its Append returned.
func crashChild(path string) {
	s, err := audit.OpenSQLite(context.Background(), path, audit.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				name := fmt.Sprintf("%d-%d", w, i)
				if err := s.Append(context.Background(), api.AuditRecord{Tenant: "alice", Kind: "exec", What: name}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				mu.Lock()
				_, _ = os.Stdout.WriteString("appended " + name + "\n")
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
