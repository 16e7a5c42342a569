package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SQLite is a Store in an SQLite database file, in WAL mode. One goroutine
// writes: it takes every Append waiting and commits them in one
// transaction (a group commit), so concurrent appends share the cost of a
// commit. A commit is written to the operating system before Append
// returns (synchronous=NORMAL in WAL mode), so a record whose Append
// returned survives the server being killed, even with SIGKILL; with
// Options.Fsync it also survives the machine losing power, at the cost of
// an fsync per commit.
type SQLite struct {
	core             // where is the database file
	w      *sql.DB   // one connection, for writes
	insert *sql.Stmt // insertSQL, prepared on w
	r      *sql.DB   // readers; WAL lets them read while the writer writes
}

var _ Store = (*SQLite)(nil)

// schemaVersion is the version of the schema this code writes and reads.
// migrations[v] takes a database from version v to v+1.
const schemaVersion = 1

var migrations = [][]string{
	{
		`CREATE TABLE audit_records (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			time_ns INTEGER NOT NULL,
			tenant TEXT NOT NULL,
			kind TEXT NOT NULL,
			session TEXT NOT NULL,
			backend TEXT NOT NULL,
			what TEXT NOT NULL,
			exit_code INTEGER NOT NULL,
			timed_out INTEGER NOT NULL,
			oom_killed INTEGER NOT NULL,
			pids_limit_hit INTEGER NOT NULL,
			duration_ms REAL NOT NULL,
			bytes INTEGER NOT NULL,
			detail TEXT NOT NULL
		)`,
		`CREATE INDEX audit_records_tenant_id ON audit_records (tenant, id)`,
		`CREATE INDEX audit_records_time ON audit_records (time_ns)`,
	},
}

// columns are the record's columns, in the order scan reads them.
const columns = `id, time_ns, tenant, kind, session, backend, what, exit_code, timed_out, oom_killed, pids_limit_hit, duration_ms, bytes, detail`

// insertSQL adds one record.
const insertSQL = `INSERT INTO audit_records (time_ns, tenant, kind, session, backend, what, exit_code, timed_out,
	oom_killed, pids_limit_hit, duration_ms, bytes, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// busyMS is how long a connection waits for another's lock.
const busyMS = 10000

// OpenSQLite opens the audit log in the SQLite database at path, creating
// the file (mode 0600, its folder 0700) and the schema when they are not
// there, and upgrading an older schema. A database of a newer schema, or
// one that is not an audit log, is refused with an error wrapping
// ErrSchema; with o.ReadOnly, a path with no file gives one wrapping
// sandbox.ErrNotFound.
func OpenSQLite(ctx context.Context, path string, o Options) (*SQLite, error) {
	if path == "" {
		return nil, fmt.Errorf("audit log: no path: %w", sandbox.ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	s := &SQLite{}
	s.core = newCore(abs, nil, o, s)
	if o.ReadOnly {
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no audit log at %s: %w", abs, sandbox.ErrNotFound)
		}
	} else if err := createFile(abs); err != nil {
		return nil, err
	}
	uri := "file:" + (&url.URL{Path: abs}).EscapedPath()
	params := fmt.Sprintf("?_busy_timeout=%d", busyMS)
	if s.r, err = sql.Open("sqlite", uri+params+"&_query_only=1"); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", abs, err)
	}
	s.r.SetMaxOpenConns(4)
	if o.ReadOnly {
		if err := s.checkVersion(ctx); err != nil {
			s.r.Close()
			return nil, err
		}
		return s, nil
	}
	level := "NORMAL"
	if o.Fsync {
		level = "FULL"
	}
	if s.w, err = sql.Open("sqlite", uri+params+"&_txlock=immediate&_journal_mode=WAL&_synchronous="+level); err != nil {
		s.r.Close()
		return nil, fmt.Errorf("audit log %s: %w", abs, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxIdleTime(0)
	if err := s.migrate(ctx); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, err
	}
	if s.insert, err = s.w.PrepareContext(ctx, insertSQL); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, fmt.Errorf("audit log %s: %w", s.where, err)
	}
	go s.run()
	return s, nil
}

// createFile makes the database file and its folder, readable by the
// owner only: the log holds the commands tenants ran.
func createFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return f.Close()
}

// migrate brings the schema to schemaVersion in one transaction, which
// holds the write lock, so that two processes opening one file at once
// cannot both create it.
func (s *SQLite) migrate(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	v, err := s.version(ctx, tx)
	if err != nil {
		return err
	}
	if v == 0 {
		var other int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT IN ('airlock_schema', 'sqlite_sequence')`).Scan(&other); err != nil {
			return fmt.Errorf("audit log %s: %w", s.where, err)
		}
		if other > 0 {
			return fmt.Errorf("audit log %s: the database holds %d tables of something else and no audit schema version: %w", s.where, other, ErrSchema)
		}
	}
	for ; v < schemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("audit log %s: upgrading the schema to version %d: %w", s.where, v+1, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM airlock_schema`); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_schema (version) VALUES (?)`, schemaVersion); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	return nil
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// version reads the schema version, 0 for a database without one, and
// refuses one newer than this code knows.
func (s *SQLite) version(ctx context.Context, q querier) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT max(version) FROM airlock_schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("audit log %s: reading the schema version: %w", s.where, err)
	}
	if v.Int64 > schemaVersion {
		return 0, fmt.Errorf("audit log %s has schema version %d, and this airlock knows versions up to %d: a newer airlock wrote it; use that one: %w",
			s.where, v.Int64, schemaVersion, ErrSchema)
	}
	return int(v.Int64), nil
}

// checkVersion is a read-only open's check: the schema must be the one
// this code reads.
func (s *SQLite) checkVersion(ctx context.Context) error {
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'airlock_schema'`).Scan(&n); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	if n == 0 {
		return fmt.Errorf("audit log %s: no audit schema version in it (not an audit log, or never opened by airlock serve): %w", s.where, ErrSchema)
	}
	return s.current(s.version(ctx, s.r))
}

// Path is the database file.
func (s *SQLite) Path() string { return s.where }

// commit implements engine.
func (s *SQLite) commit(batch []*appendReq) error {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, s.insert)
	defer stmt.Close()
	for _, req := range batch {
		for _, r := range req.recs {
			if _, err := stmt.ExecContext(ctx, r.Time.UnixNano(), r.Tenant, r.Kind, r.Session, r.Backend, r.What, r.ExitCode,
				r.TimedOut, r.OOMKilled, r.PidsLimitHit, r.DurationMS, r.Bytes, r.Detail); err != nil {
				return fmt.Errorf("audit log %s: %w", s.where, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit log %s: %w", s.where, err)
	}
	return nil
}

// selectRecords implements engine.
func (s *SQLite) selectRecords(ctx context.Context, f Filter) (recordRows, error) {
	q, args := listSQL("audit_records", f, func(int) string { return "?" })
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows are *sql.Rows as recordRows.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// deleteBefore implements engine.
func (s *SQLite) deleteBefore(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM audit_records WHERE id IN
		(SELECT id FROM audit_records WHERE time_ns < ? ORDER BY time_ns LIMIT ?)`, before.UnixNano(), pruneBatch)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Close implements Store: it waits for the appends under way to commit,
// then closes the database.
func (s *SQLite) Close() error {
	if !s.stop() {
		return nil
	}
	var errs []error
	if s.w != nil {
		errs = append(errs, s.insert.Close(), s.w.Close())
	}
	errs = append(errs, s.r.Close())
	return errors.Join(errs...)
}
