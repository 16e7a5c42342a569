package audit

import (
	"context"
	"fmt"
	"strconv"
	"time"

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
	core // where is the URL with its password masked
	pool *pgxpool.Pool
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
	s := &pgStore{}
	s.core = newCore(Redact(url), urlSecrets(url), o, s)
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
		err = s.checkVersion(ctx)
	} else {
		err = s.migrate(ctx)
	}
	if err != nil {
		s.pool.Close()
		return nil, err
	}
	if !o.ReadOnly {
		go s.run()
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
	return s.current(s.version(ctx, s.pool))
}

// commit implements engine: it writes the records of batch, in order, in
// one transaction that holds pgAppendLock from before its ids are drawn
// until it is visible. The statements go to the server in one round trip.
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

// selectRecords implements engine.
func (s *pgStore) selectRecords(ctx context.Context, f Filter) (recordRows, error) {
	q, args := listSQL(pgRecordsTable, f, func(n int) string { return "$" + strconv.Itoa(n) })
	return s.pool.Query(ctx, q, args...)
}

// deleteBefore implements engine. Appends go on meanwhile (they insert,
// and need no lock a delete holds); replicas pruning at once each count
// the records they removed.
func (s *pgStore) deleteBefore(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM airlock_audit_records WHERE id IN
		(SELECT id FROM airlock_audit_records WHERE time_ns < $1 ORDER BY time_ns LIMIT $2)`, before.UnixNano(), pruneBatch)
	return tag.RowsAffected(), err
}

// Close implements Store: it waits for the appends under way to commit,
// then closes the pool's connections.
func (s *pgStore) Close() error {
	if !s.stop() {
		return nil
	}
	s.pool.Close()
	return nil
}
