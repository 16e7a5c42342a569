package audit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStore is a Store in a PostgreSQL database, which several airlock
// serve replicas may share. Like SQLite, one goroutine per Store writes,
// taking every Append waiting into one transaction. Every append
// transaction, from any replica, first takes one transaction-level
// advisory lock (pgAppendLock) and only then draws its ids, so that
// transactions commit in the order of their ids and a reader paging by
// the last id it saw never skips a record that another replica was still
// committing. The lock is released only once the commit is visible.
type pgStore struct {
	where   string   // the URL with its secrets masked, for messages
	secrets []string // what scrub masks in errors
	now     func() time.Time
	pool    *pgxpool.Pool
	ro      bool

	mu     sync.RWMutex // held for reading while a call uses the pool
	closed bool
	reqs   chan *appendReq
	done   chan struct{} // closed when the writer has stopped
}

var _ Store = (*pgStore)(nil)

// The tables, named for airlock so that they can live in a database that
// other programs use too. The schema is the connection's current schema
// (the first of search_path that exists: set search_path in the URL to
// choose another).
const (
	pgSchemaTable  = "airlock_audit_schema"
	pgRecordsTable = "airlock_audit_records"
)

// pgMigrations[v] takes a database from version v to v+1 (schemaVersion is
// shared with SQLite: both are at version 1). The id is an identity column
// with a sequence cache of 1: a cache handing each connection a range of
// its own would give ids out of the order of the lock.
var pgMigrations = [][]string{
	{
		`CREATE TABLE IF NOT EXISTS airlock_audit_records (
			id bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
			time_ns bigint NOT NULL,
			tenant text NOT NULL,
			kind text NOT NULL,
			session text NOT NULL,
			backend text NOT NULL,
			what text NOT NULL,
			exit_code bigint NOT NULL,
			timed_out boolean NOT NULL,
			oom_killed boolean NOT NULL,
			pids_limit_hit boolean NOT NULL,
			duration_ms double precision NOT NULL,
			bytes bigint NOT NULL,
			detail text NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS airlock_audit_records_tenant_id ON airlock_audit_records (tenant, id)`,
		`CREATE INDEX IF NOT EXISTS airlock_audit_records_time ON airlock_audit_records (time_ns)`,
	},
}

// The advisory locks (keys of pg_advisory_xact_lock, which are per
// database): one serialises schema changes, the other appends.
const (
	pgMigrateLock int64 = 0x6169726c6f636b01 // "airlock" 1
	pgAppendLock  int64 = 0x6169726c6f636b02 // "airlock" 2
)

const pgInsertSQL = `INSERT INTO airlock_audit_records (time_ns, tenant, kind, session, backend, what, exit_code, timed_out,
	oom_killed, pids_limit_hit, duration_ms, bytes, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// Bounds of talking to the server.
const (
	pgConnectTimeout = 15 * time.Second // when the URL sets no connect_timeout
	pgCommitTimeout  = time.Minute      // the writer's commit, which no caller's context bounds
)

// OpenPostgres opens the audit log in the PostgreSQL database that url
// (postgres:// or postgresql://, as pgx and libpq read it) names, creating
// its tables and indexes when they are not there. Several servers may open
// one database at once, also for the first time: the schema is created and
// upgraded under an advisory lock, in one transaction. A database whose
// log has a newer schema version, or that holds a table of the log's name
// that airlock did not create, is refused with an error wrapping ErrSchema;
// with o.ReadOnly nothing is created, and a database without the log gives
// an error wrapping sandbox.ErrNotFound.
//
// Durability is the server's: with its default synchronous_commit (on), a
// record is on the server's disk before Append returns. o.Fsync makes the
// Store's connections commit so even where the server, database or role
// turned synchronous_commit off.
//
// No error or message shows the URL's password: the URL is shown with its
// password (in the user information or a password parameter) masked.
func OpenPostgres(ctx context.Context, url string, o Options) (Store, error) {
	if scheme, ok := urlScheme(url); !ok || scheme != "postgres" && scheme != "postgresql" {
		// Not echoed: a keyword/value string's password would show.
		return nil, fmt.Errorf("audit log: want a postgres:// or postgresql:// URL: %w", sandbox.ErrInvalid)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &pgStore{where: Redact(url), secrets: urlSecrets(url), now: o.Now, ro: o.ReadOnly,
		reqs: make(chan *appendReq, 64), done: make(chan struct{})}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w: %w", s.where, s.scrub(err), sandbox.ErrInvalid)
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = pgConnectTimeout
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "airlock"
	}
	if o.ReadOnly {
		cc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	if o.Fsync && !o.ReadOnly {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'`)
			return err
		}
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", s.where, s.scrub(err))
	}
	if o.ReadOnly {
		close(s.done)
		err = s.checkVersion(ctx)
	} else {
		err = s.migrate(ctx)
	}
	if err != nil {
		s.pool.Close()
		return nil, err
	}
	if !o.ReadOnly {
		go s.writer()
	}
	return s, nil
}

// pgQuerier is a pool or a transaction.
type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// tableExists reports whether the current schema holds the table.
func (s *pgStore) tableExists(ctx context.Context, q pgQuerier, name string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = $1)`, name).Scan(&ok)
	if err != nil {
		return false, s.fail("", err)
	}
	return ok, nil
}

// migrate brings the schema to schemaVersion in one transaction under
// pgMigrateLock, so that servers opening the database at once neither
// both create it nor see it half made.
func (s *pgStore) migrate(ctx context.Context) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLock); err != nil {
			return s.fail("", err)
		}
		have, err := s.tableExists(ctx, tx, pgSchemaTable)
		if err != nil {
			return err
		}
		v := 0
		if have {
			if v, err = s.version(ctx, tx); err != nil {
				return err
			}
		}
		if v == schemaVersion {
			return nil
		}
		if v == 0 {
			other, err := s.tableExists(ctx, tx, pgRecordsTable)
			if err != nil {
				return err
			}
			if other {
				return fmt.Errorf("audit log %s: the database holds a table %s but no audit schema version: airlock did not create it: %w", s.where, pgRecordsTable, ErrSchema)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS airlock_audit_schema (version integer NOT NULL)`); err != nil {
			return s.fail("", err)
		}
		for ; v < schemaVersion; v++ {
			for _, stmt := range pgMigrations[v] {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return s.fail(fmt.Sprintf("upgrading the schema to version %d", v+1), err)
				}
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM airlock_audit_schema`); err != nil {
			return s.fail("", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO airlock_audit_schema (version) VALUES ($1)`, schemaVersion); err != nil {
			return s.fail("", err)
		}
		return nil
	})
}

// tx runs f in a transaction and commits it unless f fails.
func (s *pgStore) tx(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail("", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail("", err)
	}
	return nil
}

// version reads the schema version, 0 for a table without one, and
// refuses one newer than this code knows.
func (s *pgStore) version(ctx context.Context, q pgQuerier) (int, error) {
	var v *int64
	if err := q.QueryRow(ctx, `SELECT max(version) FROM airlock_audit_schema`).Scan(&v); err != nil {
		return 0, s.fail("reading the schema version", err)
	}
	if v == nil {
		return 0, nil
	}
	if *v > schemaVersion {
		return 0, fmt.Errorf("audit log %s has schema version %d, and this airlock knows versions up to %d: a newer airlock wrote it; use that one: %w",
			s.where, *v, schemaVersion, ErrSchema)
	}
	return int(*v), nil
}

// checkVersion is a read-only open's check: the log must be there, in
// the schema this code reads.
func (s *pgStore) checkVersion(ctx context.Context) error {
	have, err := s.tableExists(ctx, s.pool, pgSchemaTable)
	if err != nil {
		return err
	}
	if !have {
		return fmt.Errorf("no audit log in %s (airlock serve creates it): %w", s.where, sandbox.ErrNotFound)
	}
	v, err := s.version(ctx, s.pool)
	if err != nil {
		return err
	}
	if v < schemaVersion {
		return fmt.Errorf("audit log %s has schema version %d, older than this airlock's %d; opening it once with airlock serve upgrades it: %w", s.where, v, schemaVersion, ErrSchema)
	}
	return nil
}

// Append implements Store.
func (s *pgStore) Append(ctx context.Context, recs ...api.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if s.ro {
		return fmt.Errorf("audit log %s: opened read-only: %w", s.where, sandbox.ErrUnsupported)
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
		return fmt.Errorf("audit log %s: %w", s.where, ErrClosed)
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
func (s *pgStore) writer() {
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

// commit writes the records of batch, in order, in one transaction that
// holds pgAppendLock from before its ids are drawn until it is visible.
// The statements go to the server in one round trip.
func (s *pgStore) commit(batch []*appendReq) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgCommitTimeout)
	defer cancel()
	return s.tx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, pgAppendLock)
		for _, req := range batch {
			for _, r := range req.recs {
				b.Queue(pgInsertSQL, r.Time.UnixNano(), r.Tenant, r.Kind, r.Session, r.Backend, r.What, r.ExitCode,
					r.TimedOut, r.OOMKilled, r.PidsLimitHit, r.DurationMS, r.Bytes, r.Detail)
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return s.fail("", err)
		}
		return nil
	})
}

// Query implements Store and server.AuditReader.
func (s *pgStore) Query(ctx context.Context, tenant string, after int64, limit int) ([]api.AuditRecord, error) {
	f, err := tenantFilter(tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return s.List(ctx, f)
}

// List implements Store.
func (s *pgStore) List(ctx context.Context, f Filter) ([]api.AuditRecord, error) {
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
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Tenant != "" {
		arg("tenant = $%d", f.Tenant)
	}
	if f.After > 0 {
		arg("id > $%d", f.After)
	}
	if !f.Since.IsZero() {
		arg("time_ns >= $%d", f.Since.UnixNano())
	}
	q := "SELECT " + columns + " FROM airlock_audit_records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	if f.Last {
		q += fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args))
	} else {
		q += fmt.Sprintf(" ORDER BY id LIMIT $%d", len(args))
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail("", err)
	}
	defer rows.Close()
	out := []api.AuditRecord{}
	for rows.Next() {
		var r api.AuditRecord
		var ns int64
		if err := rows.Scan(&r.ID, &ns, &r.Tenant, &r.Kind, &r.Session, &r.Backend, &r.What, &r.ExitCode, &r.TimedOut,
			&r.OOMKilled, &r.PidsLimitHit, &r.DurationMS, &r.Bytes, &r.Detail); err != nil {
			return nil, s.fail("", err)
		}
		r.Time = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("", err)
	}
	if f.Last {
		slices.Reverse(out)
	}
	return out, nil
}

// Prune implements Store. It deletes in batches, so that no delete holds
// many rows' locks for long; appends go on meanwhile (they insert, and
// need no lock a delete holds). Replicas pruning at once each count the
// records they removed.
func (s *pgStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	if s.ro {
		return 0, fmt.Errorf("audit log %s: opened read-only: %w", s.where, sandbox.ErrUnsupported)
	}
	unlock, err := s.hold()
	if err != nil {
		return 0, err
	}
	defer unlock()
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM airlock_audit_records WHERE id IN
			(SELECT id FROM airlock_audit_records WHERE time_ns < $1 ORDER BY time_ns LIMIT $2)`, before.UnixNano(), pruneBatch)
		if err != nil {
			return total, s.fail("pruning", err)
		}
		n := tag.RowsAffected()
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// hold keeps the Store from closing until unlock runs; it fails once the
// Store is closed.
func (s *pgStore) hold() (unlock func(), err error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, fmt.Errorf("audit log %s: %w", s.where, ErrClosed)
	}
	return s.mu.RUnlock, nil
}

// Close implements Store: it waits for the appends under way to commit,
// then closes the pool's connections.
func (s *pgStore) Close() error {
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
	s.pool.Close()
	return nil
}

// fail wraps an error of the database, saying what was done when what is
// not empty, with the URL's secrets masked.
func (s *pgStore) fail(what string, err error) error {
	if what != "" {
		return fmt.Errorf("audit log %s: %s: %w", s.where, what, s.scrub(err))
	}
	return fmt.Errorf("audit log %s: %w", s.where, s.scrub(err))
}

// scrub masks the secrets of the URL in err's text. pgx masks passwords
// in what it reports already; this holds whatever a driver or a server
// quotes back.
func (s *pgStore) scrub(err error) error {
	if err == nil || len(s.secrets) == 0 {
		return err
	}
	return scrubbed{err, s.secrets}
}

// scrubbed is an error whose text has secrets masked; errors.Is and
// errors.As still see the error it wraps.
type scrubbed struct {
	err     error
	secrets []string // longest first
}

func (e scrubbed) Error() string {
	msg := e.err.Error()
	for _, x := range e.secrets {
		msg = strings.ReplaceAll(msg, x, redacted)
	}
	return msg
}

func (e scrubbed) Unwrap() error { return e.err }
