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
)

// core is what SQLite and pgStore share, which embed it: Append hands the
// records to one goroutine (run), which takes every Append waiting and
// commits them in one transaction (a group commit), until stop; List,
// Query and Prune check their arguments, keep the Store from closing
// meanwhile, and leave the statements to the store's engine.
type core struct {
	where   string   // the log, for messages: a file, or a URL with its password masked
	secrets []string // what fail masks in errors
	ro      bool
	now     func() time.Time
	db      engine

	mu     sync.RWMutex // held for reading while a request is handed to run, or a call (hold) uses the database
	closed bool
	reqs   chan *appendReq
	done   chan struct{} // closed when run has stopped; at once when read-only
}

// engine is what a store does in its own database: its statements.
type engine interface {
	// commit writes the records of batch in one transaction; its error
	// says which log failed.
	commit(batch []*appendReq) error
	// selectRecords runs the query that listSQL makes of f.
	selectRecords(ctx context.Context, f Filter) (recordRows, error)
	// deleteBefore deletes up to pruneBatch of the records whose time is
	// before before, oldest first, and returns how many it deleted.
	deleteBefore(ctx context.Context, before time.Time) (int64, error)
}

// recordRows are the rows of a select of columns: pgx.Rows, or sqlRows.
type recordRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// appendReq is one Append waiting for its commit.
type appendReq struct {
	recs []api.AuditRecord
	err  chan error
}

// Bounds of the writer.
const (
	maxBatch   = 512  // records in one commit
	pruneBatch = 5000 // records one delete removes; appends run between
)

// newCore makes the core of the log where, whose statements db runs and
// whose errors may quote secrets; unless o.ReadOnly, run must be started
// for appends to go through.
func newCore(where string, secrets []string, o Options, db engine) core {
	if o.Now == nil {
		o.Now = time.Now
	}
	done := make(chan struct{})
	if o.ReadOnly {
		close(done)
	}
	return core{where: where, secrets: secrets, ro: o.ReadOnly, now: o.Now, db: db,
		reqs: make(chan *appendReq, 64), done: done}
}

// writable fails if the log was opened read-only.
func (s *core) writable() error {
	if s.ro {
		return fmt.Errorf("audit log %s: opened read-only: %w", s.where, sandbox.ErrUnsupported)
	}
	return nil
}

// Append implements Store.
func (s *core) Append(ctx context.Context, recs ...api.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := s.writable(); err != nil {
		return err
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

// run commits the waiting appends, as many as are waiting (up to maxBatch
// records) in each transaction, until stop.
func (s *core) run() {
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
		err := s.db.commit(batch)
		for _, r := range batch {
			r.err <- err
		}
	}
}

// Query implements Store and server.AuditReader.
func (s *core) Query(ctx context.Context, tenant string, after int64, limit int) ([]api.AuditRecord, error) {
	f, err := tenantFilter(tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return s.List(ctx, f)
}

// List implements Store.
func (s *core) List(ctx context.Context, f Filter) ([]api.AuditRecord, error) {
	f, err := checkFilter(f)
	if err != nil {
		return nil, err
	}
	unlock, err := s.hold()
	if err != nil {
		return nil, err
	}
	defer unlock()
	rows, err := s.db.selectRecords(ctx, f)
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

// listSQL is the query of List for f in table, and its arguments;
// placeholder writes the placeholder of the nth argument, from 1.
func listSQL(table string, f Filter, placeholder func(n int) string) (string, []any) {
	var where []string
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond+placeholder(len(args)))
	}
	if f.Tenant != "" {
		arg("tenant = ", f.Tenant)
	}
	if f.After > 0 {
		arg("id > ", f.After)
	}
	if !f.Since.IsZero() {
		arg("time_ns >= ", f.Since.UnixNano())
	}
	q := "SELECT " + columns + " FROM " + table
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Last {
		q += " ORDER BY id DESC"
	} else {
		q += " ORDER BY id"
	}
	args = append(args, f.Limit)
	return q + " LIMIT " + placeholder(len(args)), args
}

// Prune implements Store. It deletes in batches of pruneBatch, so that no
// one long delete holds up appends or holds many rows' locks.
func (s *core) Prune(ctx context.Context, before time.Time) (int64, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	unlock, err := s.hold()
	if err != nil {
		return 0, err
	}
	defer unlock()
	var total int64
	for {
		n, err := s.db.deleteBefore(ctx, before)
		if err != nil {
			return total, s.fail("pruning", err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// hold keeps the Store from closing until unlock runs; it fails once the
// Store is closed.
func (s *core) hold() (unlock func(), err error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, fmt.Errorf("audit log %s: %w", s.where, ErrClosed)
	}
	return s.mu.RUnlock, nil
}

// stop refuses further calls and waits for the appends under way to
// commit: the first part of Close, after which the store closes its
// database. It reports whether this call closed the Store: false when an
// earlier one did, and then it does not wait.
func (s *core) stop() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	if !s.ro {
		close(s.reqs)
	}
	s.mu.Unlock()
	<-s.done
	return true
}

// current is the end of a read-only open's check: v, the schema version
// read (unless err), must be the one this code reads.
func (s *core) current(v int, err error) error {
	if err != nil {
		return err
	}
	if v < schemaVersion {
		return fmt.Errorf("audit log %s has schema version %d, older than this airlock's %d; opening it once with airlock serve upgrades it: %w", s.where, v, schemaVersion, ErrSchema)
	}
	return nil
}

// fail wraps an error of the database, saying what was done when what is
// not empty, with the log's secrets masked.
func (s *core) fail(what string, err error) error {
	if what != "" {
		return fmt.Errorf("audit log %s: %s: %w", s.where, what, s.scrub(err))
	}
	return fmt.Errorf("audit log %s: %w", s.where, s.scrub(err))
}

// scrub masks the log's secrets in err's text. pgx masks passwords in
// what it reports already; this holds whatever a driver or a server
// quotes back.
func (s *core) scrub(err error) error {
	if err == nil || len(s.secrets) == 0 {
		return err
	}
	return scrubbed{err, s.secrets}
}
