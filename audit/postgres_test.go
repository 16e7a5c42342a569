package audit_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/audit/audittest"
	"github.com/airlock-sandbox/airlock/internal/testpg"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func openPostgres(t *testing.T, url string, o audit.Options) audit.Store {
	t.Helper()
	s, err := audit.OpenPostgres(context.Background(), url, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestPostgresSuite runs the suite on a real server, each test in a
// database of its own; then again with Fsync, in databases whose
// synchronous_commit is off, which the Store's connections turn back on.
func TestPostgresSuite(t *testing.T) {
	srv := testpg.Start(t)
	t.Run("Default", func(t *testing.T) {
		audittest.Run(t, func(t *testing.T) audit.Store {
			return openPostgres(t, srv.NewDatabase(t), audit.Options{})
		})
	})
	t.Run("Fsync", func(t *testing.T) {
		audittest.Run(t, func(t *testing.T) audit.Store {
			u := srv.NewDatabase(t)
			if err := srv.Exec("postgres", "ALTER DATABASE "+dbName(t, u)+" SET synchronous_commit = off"); err != nil {
				t.Fatal(err)
			}
			return openPostgres(t, u, audit.Options{Fsync: true})
		})
	})
}

// TestPostgres: the PostgreSQL store's own behaviour, each test in a
// database of its own on one server.
func TestPostgres(t *testing.T) {
	srv := testpg.Start(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *testpg.Server)
	}{
		{"Reopen", testPostgresReopen},
		{"NewerSchema", testPostgresNewerSchema},
		{"SharedDatabase", testPostgresSharedDatabase},
		{"ReadOnly", testPostgresReadOnly},
		{"Open", testPostgresOpen},
		{"PasswordNotShown", testPostgresPasswordNotShown},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, srv) })
	}
}

// dbName is the database of a URL.
func dbName(t *testing.T, u string) string {
	t.Helper()
	return strings.TrimPrefix(mustParse(t, u).Path, "/")
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestPostgresReplicas: stores opened at once on one new database (as
// replicas starting together) all open; they append at once, and each
// sees every replica's records, in one order of increasing ids. A reader
// paging on one replica while the others write never skips a record: a
// transaction that drew lower ids commits before one that drew higher.
func TestPostgresReplicas(t *testing.T) {
	srv := testpg.Start(t)
	u := srv.NewDatabase(t)
	ctx := context.Background()
	const replicas, writers, each = 4, 3, 40
	stores := make([]audit.Store, replicas)
	var wg sync.WaitGroup
	errs := make(chan error, replicas*writers+1)
	for i := range stores {
		wg.Go(func() {
			s, err := audit.OpenPostgres(ctx, u, audit.Options{})
			if err != nil {
				errs <- fmt.Errorf("replica %d: open: %w", i, err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { _ = s.Close() })
		}
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	// The reader pages on replica 0 until the writers are done, then to
	// the end.
	stop := make(chan struct{})
	var seen []api.AuditRecord
	var rd sync.WaitGroup
	rd.Go(func() {
		after := int64(0)
		for done := false; ; {
			select {
			case <-stop:
				done = true
			default:
			}
			page, err := stores[0].Query(ctx, "alice", after, 5)
			if err != nil {
				errs <- err
				return
			}
			for _, r := range page {
				if r.ID <= after {
					errs <- fmt.Errorf("the reader got id %d after %d", r.ID, after)
					return
				}
				after = r.ID
			}
			seen = append(seen, page...)
			if done && len(page) == 0 {
				return
			}
		}
	})
	for i, s := range stores {
		for w := range writers {
			wg.Go(func() {
				for k := range each {
					// Some appends carry two records, which keep their
					// order.
					recs := []api.AuditRecord{{Tenant: "alice", Kind: "exec", What: fmt.Sprintf("%d-%d-%d", i, w, k)}}
					if k%5 == 0 {
						recs = append(recs, api.AuditRecord{Tenant: "alice", Kind: "exec", What: fmt.Sprintf("%d-%d-%d+", i, w, k)})
					}
					if err := s.Append(ctx, recs...); err != nil {
						errs <- fmt.Errorf("replica %d: %w", i, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	rd.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	want := replicas * writers * (each + each/5)
	var first []api.AuditRecord
	for i, s := range stores {
		got := listAll(t, s)
		checkIncreasing(t, got)
		if len(got) != want {
			t.Fatalf("replica %d sees %d records, want %d", i, len(got), want)
		}
		if i == 0 {
			first = got
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(first) {
			t.Errorf("replica %d sees other records than replica 0", i)
		}
	}
	if len(seen) != len(first) {
		t.Errorf("the reader paging while the replicas wrote saw %d of the %d records: it skipped some", len(seen), len(first))
	}
	at := map[string]int64{}
	for _, r := range first {
		at[r.What] = r.ID
	}
	for what, id := range at {
		if pair, ok := at[what+"+"]; ok && pair <= id {
			t.Errorf("the records appended together as %s have ids %d and %d, out of order", what, id, pair)
		}
	}
}

func checkIncreasing(t *testing.T, recs []api.AuditRecord) {
	t.Helper()
	for i := 1; i < len(recs); i++ {
		if recs[i].ID <= recs[i-1].ID {
			t.Fatalf("id %d after %d", recs[i].ID, recs[i-1].ID)
		}
	}
}

// testPostgresReopen: records outlive the Store, and ids go on increasing
// after a reopening, even once every record was pruned.
func testPostgresReopen(t *testing.T, srv *testpg.Server) {
	u := srv.NewDatabase(t)
	ctx := context.Background()
	s := openPostgres(t, u, audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Time: at, Tenant: "alice", Kind: "exec", What: "one"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openPostgres(t, u, audit.Options{})
	got, err := s.Query(ctx, "alice", 0, 10)
	if err != nil || len(got) != 1 || got[0].What != "one" {
		t.Fatalf("after reopening: %+v, %v", got, err)
	}
	if n, err := s.Prune(ctx, at.Add(time.Hour)); n != 1 || err != nil {
		t.Fatalf("prune: %d, %v", n, err)
	}
	s.Close()
	s = openPostgres(t, u, audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Time: at, Tenant: "alice", Kind: "exec", What: "two"}); err != nil {
		t.Fatal(err)
	}
	two, err := s.Query(ctx, "alice", 0, 10)
	if err != nil || len(two) != 1 || two[0].ID <= got[0].ID {
		t.Errorf("after pruning everything and reopening: %+v, %v; want one record with an id above %d", two, err, got[0].ID)
	}
}

// testPostgresNewerSchema: a log that a newer airlock wrote is refused,
// saying which versions, and is left as it was.
func testPostgresNewerSchema(t *testing.T, srv *testpg.Server) {
	u := srv.NewDatabase(t)
	openPostgres(t, u, audit.Options{}).Close()
	db := dbName(t, u)
	if err := srv.Exec(db, `UPDATE airlock_audit_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := audit.OpenPostgres(context.Background(), u, audit.Options{ReadOnly: ro})
		if !errors.Is(err, audit.ErrSchema) || !strings.Contains(err.Error(), "schema version 99") || !strings.Contains(err.Error(), "up to 1") {
			t.Errorf("read-only %v: opening a schema of version 99: %v; want ErrSchema naming 99 and 1", ro, err)
		}
	}
	if err := srv.Exec(db, `DO $$ BEGIN IF (SELECT version FROM airlock_audit_schema) <> 99 THEN RAISE 'changed'; END IF; END $$`); err != nil {
		t.Errorf("the refused log's version: %v; want it untouched", err)
	}
}

// testPostgresSharedDatabase: the log lives beside other programs' tables,
// but a table of its name that airlock did not make is refused, not
// written into.
func testPostgresSharedDatabase(t *testing.T, srv *testpg.Server) {
	ctx := context.Background()
	u := srv.NewDatabase(t)
	db := dbName(t, u)
	if err := srv.Exec(db, `CREATE TABLE customers (name text)`, `INSERT INTO customers VALUES ('x')`); err != nil {
		t.Fatal(err)
	}
	s := openPostgres(t, u, audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Tenant: "alice", Kind: "exec"}); err != nil {
		t.Errorf("append in a database with other tables: %v", err)
	}

	u = srv.NewDatabase(t)
	db = dbName(t, u)
	if err := srv.Exec(db, `CREATE TABLE airlock_audit_records (id int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.OpenPostgres(ctx, u, audit.Options{}); !errors.Is(err, audit.ErrSchema) {
		t.Errorf("a database with a foreign airlock_audit_records: %v, want ErrSchema", err)
	}
	if err := srv.Exec(db, `SELECT id FROM airlock_audit_records`); err != nil {
		t.Errorf("the foreign table changed: %v", err)
	}

	// search_path in the URL puts the log in a schema of its own.
	u = srv.NewDatabase(t)
	db = dbName(t, u)
	if err := srv.Exec(db, `CREATE SCHEMA airlock`); err != nil {
		t.Fatal(err)
	}
	s = openPostgres(t, u+"&search_path=airlock", audit.Options{})
	if err := s.Append(ctx, api.AuditRecord{Tenant: "alice", Kind: "exec"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Exec(db, `SELECT id FROM airlock.airlock_audit_records`); err != nil {
		t.Errorf("the log is not in the schema search_path named: %v", err)
	}
}

// testPostgresReadOnly: a reader opens the log a server is writing, sees
// what it wrote, and writes nothing; where there is no log, it creates
// none.
func testPostgresReadOnly(t *testing.T, srv *testpg.Server) {
	ctx := context.Background()
	u := srv.NewDatabase(t)
	if _, err := audit.OpenPostgres(ctx, u, audit.Options{ReadOnly: true}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("read-only open of a database without a log: %v, want ErrNotFound", err)
	}
	db := dbName(t, u)
	if err := srv.Exec(db, `DO $$ BEGIN IF to_regclass('airlock_audit_schema') IS NOT NULL THEN RAISE 'created'; END IF; END $$`); err != nil {
		t.Errorf("the read-only open created the log: %v", err)
	}
	w := openPostgres(t, u, audit.Options{})
	r := openPostgres(t, u, audit.Options{ReadOnly: true})
	checkReader(t, w, r)
	if err := r.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := r.List(ctx, audit.Filter{}); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("list after close: %v, want ErrClosed", err)
	}
}

// testPostgresOpen: audit.Open takes both URL schemes to PostgreSQL.
func testPostgresOpen(t *testing.T, srv *testpg.Server) {
	ctx := context.Background()
	for _, scheme := range []string{"postgres", "postgresql"} {
		u := mustParse(t, srv.NewDatabase(t))
		u.Scheme = scheme
		s, err := audit.Open(ctx, u.String(), audit.Options{})
		if err != nil {
			t.Fatalf("open %s: %v", scheme, err)
		}
		if err := s.Append(ctx, api.AuditRecord{Tenant: "alice", Kind: "exec", What: scheme}); err != nil {
			t.Error(err)
		}
		if got, err := s.Query(ctx, "alice", 0, 10); err != nil || len(got) != 1 || got[0].What != scheme {
			t.Errorf("%s: %+v, %v", scheme, got, err)
		}
		s.Close()
	}
}

// testPostgresPasswordNotShown: no error of opening shows the URL's
// password, escaped or not, whether the URL is wrong, the password is, the
// database is missing or the server cannot be reached.
func testPostgresPasswordNotShown(t *testing.T, srv *testpg.Server) {
	ctx := context.Background()
	good := mustParse(t, srv.URL("postgres"))
	withPassword := func(pw string, edit func(*url.URL)) string {
		u := *good
		u.User = url.UserPassword(testpg.User, pw)
		if edit != nil {
			edit(&u)
		}
		return u.String()
	}
	const wrong = "Wr0ng-S3cret!/@:"
	type tc struct {
		name, url string
		secrets   []string
	}
	cases := []tc{
		{"wrong password", withPassword(wrong, nil), []string{wrong, url.UserPassword("", wrong).String()[1:]}},
		{"no such database", withPassword(srv.Password(), func(u *url.URL) { u.Path = "/nosuchdb" }),
			[]string{srv.Password(), url.UserPassword("", srv.Password()).String()[1:]}},
		{"no server", withPassword(srv.Password(), func(u *url.URL) { u.RawQuery = "host=/nonexistent&connect_timeout=2" }),
			[]string{srv.Password()}},
		{"bad port", "postgres://airlock:Sekrit-1@db.invalid:99999x/audit", []string{"Sekrit-1"}},
		{"unescaped slash", "postgres://airlock:Sek/rit-2@127.0.0.1:1/audit", []string{"Sek/rit-2", "Sek", "rit-2"}},
		{"unescaped hash", "postgres://airlock:12#Sekrit-3@127.0.0.1:1/audit", []string{"12#Sekrit-3", "Sekrit-3"}},
		{"password parameter", "postgres://airlock@127.0.0.1:1/audit?password=Sekrit-4&connect_timeout=bad", []string{"Sekrit-4"}},
		{"sslpassword", "postgres://airlock@127.0.0.1:1/audit?sslpassword=Sekrit-5&sslmode=bogus", []string{"Sekrit-5"}},
		{"other scheme", "mysql://airlock:Sekrit-6@127.0.0.1:1/audit", []string{"Sekrit-6"}},
	}
	for _, c := range cases {
		_, err := audit.Open(ctx, c.url, audit.Options{})
		if err == nil {
			t.Errorf("%s: opened", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		for _, x := range c.secrets {
			if strings.Contains(err.Error(), x) {
				t.Errorf("%s: the error shows %q: %v", c.name, x, err)
			}
		}
		if shown := audit.Redact(c.url); strings.Contains(shown, c.secrets[0]) {
			t.Errorf("%s: Redact shows the password: %s", c.name, shown)
		}
	}
	if _, err := audit.Open(ctx, withPassword(wrong, nil), audit.Options{}); !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("a wrong password's error does not say so: %v", err)
	}
	if _, err := audit.Open(ctx, "mysql://x@y/z", audit.Options{}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a mysql URL: %v, want ErrUnsupported", err)
	}
	if _, err := audit.Open(ctx, "postgres://a:b@h:bad/db", audit.Options{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a URL that does not parse: %v, want ErrInvalid", err)
	}
	// OpenPostgres takes URLs only: pgx would also read "host=... password=...".
	if _, err := audit.OpenPostgres(ctx, "host=/nonexistent password=Sekrit-7", audit.Options{}); !errors.Is(err, sandbox.ErrInvalid) || strings.Contains(err.Error(), "Sekrit-7") {
		t.Errorf("a keyword/value string: %v, want ErrInvalid without the password", err)
	}
}

// TestRedact: what a URL looks like in messages.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/airlock/audit.db":                              "/var/lib/airlock/audit.db",
		"postgres://u:secret@db:5432/audit?sslmode=require":      "postgres://u:xxxxx@db:5432/audit?sslmode=require",
		"postgresql://u@db/audit":                                "postgresql://u@db/audit",
		"postgres://u:p%40ss%2F@db/audit":                        "postgres://u:xxxxx@db/audit",
		"postgres://db/audit?user=u&password=secret&x=1":         "postgres://db/audit?user=u&password=xxxxx&x=1",
		"postgres://db/audit?pass%77ord=secret":                  "postgres://db/audit?pass%77ord=xxxxx",
		"postgres://u:pa/ss@db/audit":                            "postgres://(a URL that does not parse as one, not shown)",
		"postgres://u:12?ss@db/audit":                            "postgres://(a URL that does not parse as one, not shown)",
		"postgres://u:se cret@db/audit":                          "postgres://(a URL that does not parse as one, not shown)",
		"postgres://airlock:pw@/audit?host=%2Ftmp%2Fx&sslmode=x": "postgres://airlock:xxxxx@/audit?host=%2Ftmp%2Fx&sslmode=x",
	} {
		if got := audit.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
