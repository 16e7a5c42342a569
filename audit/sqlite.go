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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
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
	path   string
	now    func() time.Time
	w      *sql.DB   // one connection, for writes
	insert *sql.Stmt // insertSQL, prepared on w
	r      *sql.DB   // readers; WAL lets them read while the writer writes
	ro     bool

	mu     sync.RWMutex // held for reading while a request is handed to the writer
	closed bool
	reqs   chan *appendReq
	done   chan struct{} // closed when the writer has stopped
}

var _ Store = (*SQLite)(nil)

// appendReq is one Append waiting for its commit.
type appendReq struct {
	recs []api.AuditRecord
	err  chan error
}

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

// Bounds of the writer.
const (
	maxBatch   = 512   // records in one commit
	pruneBatch = 5000  // records one delete removes; appends run between
	busyMS     = 10000 // how long a connection waits for another's lock
)

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
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &SQLite{path: abs, now: o.Now, ro: o.ReadOnly, reqs: make(chan *appendReq, 64), done: make(chan struct{})}
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
		close(s.done)
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
		return nil, fmt.Errorf("audit log %s: %w", s.path, err)
	}
	go s.writer()
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
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	v, err := s.version(ctx, tx)
	if err != nil {
		return err
	}
	if v == 0 {
		var other int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT IN ('airlock_schema', 'sqlite_sequence')`).Scan(&other); err != nil {
			return fmt.Errorf("audit log %s: %w", s.path, err)
		}
		if other > 0 {
			return fmt.Errorf("audit log %s: the database holds %d tables of something else and no audit schema version: %w", s.path, other, ErrSchema)
		}
	}
	for ; v < schemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("audit log %s: upgrading the schema to version %d: %w", s.path, v+1, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM airlock_schema`); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO airlock_schema (version) VALUES (?)`, schemaVersion); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
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
		return 0, fmt.Errorf("audit log %s: reading the schema version: %w", s.path, err)
	}
	if v.Int64 > schemaVersion {
		return 0, fmt.Errorf("audit log %s has schema version %d, and this airlock knows versions up to %d: a newer airlock wrote it; use that one: %w",
			s.path, v.Int64, schemaVersion, ErrSchema)
	}
	return int(v.Int64), nil
}

// checkVersion is a read-only open's check: the schema must be the one
// this code reads.
func (s *SQLite) checkVersion(ctx context.Context) error {
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'airlock_schema'`).Scan(&n); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	if n == 0 {
		return fmt.Errorf("audit log %s: no audit schema version in it (not an audit log, or never opened by airlock serve): %w", s.path, ErrSchema)
	}
	v, err := s.version(ctx, s.r)
	if err != nil {
		return err
	}
	if v < schemaVersion {
		return fmt.Errorf("audit log %s has schema version %d, older than this airlock's %d; opening it once with airlock serve upgrades it: %w", s.path, v, schemaVersion, ErrSchema)
	}
	return nil
}

// Path is the database file.
func (s *SQLite) Path() string { return s.path }

// Append implements Store.
func (s *SQLite) Append(ctx context.Context, recs ...api.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if s.ro {
		return fmt.Errorf("audit log %s: opened read-only: %w", s.path, sandbox.ErrUnsupported)
	}
	norm := make([]api.AuditRecord, len(recs))
	for i, r := range recs {
		norm[i] = Normalize(r, s.now)
		if norm[i].Kind == "" {
			return fmt.Errorf("audit record %d: no kind: %w", i, sandbox.ErrInvalid)
		}
	}
	req := &appendReq{recs: norm, err: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("audit log %s: %w", s.path, ErrClosed)
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	select {
	case err := <-req.err:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writer commits the waiting appends, as many as are waiting (up to
// maxBatch records) in each transaction, until Close.
func (s *SQLite) writer() {
	defer close(s.done)
	for req := range s.reqs {
		batch := []*appendReq{req}
		n := len(req.recs)
	gather:
		for n < maxBatch {
			select {
			case more, ok := <-s.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, more)
				n += len(more.recs)
			default:
				break gather
			}
		}
		err := s.commit(batch)
		for _, r := range batch {
			r.err <- err
		}
	}
}

// commit writes the records of batch in one transaction.
func (s *SQLite) commit(batch []*appendReq) error {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, s.insert)
	defer stmt.Close()
	for _, req := range batch {
		for _, r := range req.recs {
			if _, err := stmt.ExecContext(ctx, r.Time.UnixNano(), r.Tenant, r.Kind, r.Session, r.Backend, r.What, r.ExitCode,
				r.TimedOut, r.OOMKilled, r.PidsLimitHit, r.DurationMS, r.Bytes, r.Detail); err != nil {
				return fmt.Errorf("audit log %s: %w", s.path, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit log %s: %w", s.path, err)
	}
	return nil
}

// Query implements Store and server.AuditReader.
func (s *SQLite) Query(ctx context.Context, tenant string, after int64, limit int) ([]api.AuditRecord, error) {
	f, err := tenantFilter(tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return s.List(ctx, f)
}

// List implements Store.
func (s *SQLite) List(ctx context.Context, f Filter) ([]api.AuditRecord, error) {
	f, err := checkFilter(f)
	if err != nil {
		return nil, err
	}
	unlock, err := s.hold()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var where []string
	var args []any
	if f.Tenant != "" {
		where, args = append(where, "tenant = ?"), append(args, f.Tenant)
	}
	if f.After > 0 {
		where, args = append(where, "id > ?"), append(args, f.After)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "time_ns >= ?"), append(args, f.Since.UnixNano())
	}
	q := "SELECT " + columns + " FROM audit_records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Last {
		q += " ORDER BY id DESC LIMIT ?"
	} else {
		q += " ORDER BY id LIMIT ?"
	}
	rows, err := s.r.QueryContext(ctx, q, append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", s.path, err)
	}
	defer rows.Close()
	out := []api.AuditRecord{}
	for rows.Next() {
		var r api.AuditRecord
		var ns int64
		if err := rows.Scan(&r.ID, &ns, &r.Tenant, &r.Kind, &r.Session, &r.Backend, &r.What, &r.ExitCode, &r.TimedOut,
			&r.OOMKilled, &r.PidsLimitHit, &r.DurationMS, &r.Bytes, &r.Detail); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", s.path, err)
		}
		r.Time = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", s.path, err)
	}
	if f.Last {
		slices.Reverse(out)
	}
	return out, nil
}

// Prune implements Store. It deletes in batches, so that appends are not
// held up behind one long delete.
func (s *SQLite) Prune(ctx context.Context, before time.Time) (int64, error) {
	if s.ro {
		return 0, fmt.Errorf("audit log %s: opened read-only: %w", s.path, sandbox.ErrUnsupported)
	}
	unlock, err := s.hold()
	if err != nil {
		return 0, err
	}
	defer unlock()
	var total int64
	for {
		res, err := s.w.ExecContext(ctx, `DELETE FROM audit_records WHERE id IN
			(SELECT id FROM audit_records WHERE time_ns < ? ORDER BY time_ns LIMIT ?)`, before.UnixNano(), pruneBatch)
		if err != nil {
			return total, fmt.Errorf("audit log %s: pruning: %w", s.path, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("audit log %s: pruning: %w", s.path, err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// hold keeps the Store from closing until unlock runs; it fails once the
// Store is closed.
func (s *SQLite) hold() (unlock func(), err error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, fmt.Errorf("audit log %s: %w", s.path, ErrClosed)
	}
	return s.mu.RUnlock, nil
}

// Close implements Store: it waits for the appends under way to commit,
// then closes the database.
func (s *SQLite) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if !s.ro {
		close(s.reqs)
	}
	s.mu.Unlock()
	<-s.done
	var errs []error
	if s.w != nil {
		errs = append(errs, s.insert.Close(), s.w.Close())
	}
	errs = append(errs, s.r.Close())
	return errors.Join(errs...)
}
