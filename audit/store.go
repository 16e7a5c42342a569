package audit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Store keeps audit records. Its methods are safe for concurrent use.
//
// Record IDs are assigned by the Store: positive, unique, and increasing in
// the order the records become visible, so that a reader paging with the
// last ID it saw (Filter.After) never skips a record that was visible when
// it read the page before. IDs are never reused, not even after Prune
// removed every record. A Store backed by a database that commits
// concurrent transactions out of ID order (PostgreSQL's sequences do) must
// serialise its appends, for example under a transaction-level advisory
// lock, to keep this promise.
type Store interface {
	// Append adds records, in order, and returns once they are stored as
	// durably as the Store promises (for SQLite: written to the operating
	// system, so that they survive the server being killed). Records with
	// a zero Time get the current time; their IDs are ignored. Strings are
	// bounded and made valid UTF-8 as Normalize does. When ctx ends first,
	// Append returns its error, and the records may or may not be stored.
	Append(ctx context.Context, recs ...api.AuditRecord) error
	// Query returns up to limit of tenant's records whose ID is above
	// after, in ID order: a page of GET /v1/audit (it makes a Store a
	// server.AuditReader). tenant must not be empty; limit is 1 to
	// MaxLimit.
	Query(ctx context.Context, tenant string, after int64, limit int) ([]api.AuditRecord, error)
	// List returns the records that f selects, in ID order: for operators,
	// across tenants.
	List(ctx context.Context, f Filter) ([]api.AuditRecord, error)
	// Prune removes the records whose Time is before before and returns
	// how many it removed.
	Prune(ctx context.Context, before time.Time) (int64, error)
	// Close releases the Store; later calls fail with ErrClosed.
	Close() error
}

// Filter selects records for List.
type Filter struct {
	// Tenant selects one tenant's records; "" selects every tenant's.
	Tenant string
	// After selects records whose ID is above it.
	After int64
	// Since selects records whose Time is not before it; zero selects
	// any time.
	Since time.Time
	// Limit is the most records to return, 1 to MaxLimit; 0 means
	// DefaultLimit.
	Limit int
	// Last returns the last Limit records selected instead of the first
	// (still in ID order): the tail of the log.
	Last bool
}

// Bounds of queries.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Errors of a Store besides sandbox's sentinels (sandbox.ErrInvalid for a
// bad argument, sandbox.ErrNotFound for a log that is not there).
var (
	// ErrSchema means the database holds a schema this airlock cannot use:
	// a newer version than it knows, or not an audit log at all.
	ErrSchema = errors.New("audit log schema")
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("audit log closed")
)

// Bounds of what one record keeps, in runes. Event producers cut what
// ran already (session keeps 200 runes); these hold for any caller.
const (
	MaxWhat   = 256
	MaxDetail = 1024
	maxName   = 128 // tenant, kind, session, backend
)

// Normalize returns rec as a Store keeps it: strings valid UTF-8 without
// NUL bytes (which PostgreSQL's text refuses), cut to their bounds, and the
// time in UTC (the current time when it is zero).
func Normalize(rec api.AuditRecord, now func() time.Time) api.AuditRecord {
	if rec.Time.IsZero() {
		rec.Time = now()
	}
	rec.Time = rec.Time.UTC()
	rec.Tenant = bound(rec.Tenant, maxName)
	rec.Kind = bound(rec.Kind, maxName)
	rec.Session = bound(rec.Session, maxName)
	rec.Backend = bound(rec.Backend, maxName)
	rec.What = bound(rec.What, MaxWhat)
	rec.Detail = bound(rec.Detail, MaxDetail)
	return rec
}

// bound makes s valid UTF-8 without NUL and cuts it to n runes, marking
// a cut with "…".
func bound(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// checkFilter checks a Filter and fills its default limit.
func checkFilter(f Filter) (Filter, error) {
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return f, fmt.Errorf("audit query: limit %d: want 1 to %d: %w", f.Limit, MaxLimit, sandbox.ErrInvalid)
	}
	if f.After < 0 {
		return f, fmt.Errorf("audit query: after %d: want a record id: %w", f.After, sandbox.ErrInvalid)
	}
	return f, nil
}

// tenantFilter is the Filter of a Query, which must name a tenant.
func tenantFilter(tenant string, after int64, limit int) (Filter, error) {
	if tenant == "" {
		return Filter{}, fmt.Errorf("audit query: no tenant: %w", sandbox.ErrInvalid)
	}
	if limit < 1 {
		return Filter{}, fmt.Errorf("audit query: limit %d: want 1 to %d: %w", limit, MaxLimit, sandbox.ErrInvalid)
	}
	return checkFilter(Filter{Tenant: tenant, After: after, Limit: limit})
}

// Options configure Open.
type Options struct {
	// ReadOnly opens an existing log for reading only: nothing is created
	// or upgraded, and Append and Prune fail.
	ReadOnly bool
	// Fsync makes every commit wait for the disk, so that records also
	// survive the machine losing power; without it SQLite's survive the
	// server being killed (they are written to the operating system
	// before Append returns) but not a crash of the machine. PostgreSQL's
	// commits wait for its disk unless its synchronous_commit is off;
	// Fsync turns it on for the Store's connections.
	Fsync bool
	// Now replaces the clock that stamps records without a time, for
	// tests.
	Now func() time.Time
}

// Open opens the audit log where says: a postgres:// or postgresql:// URL
// opens a PostgreSQL database (OpenPostgres), which several servers may
// share; a file path opens (or creates) an SQLite database (OpenSQLite).
// Other URLs are refused with sandbox.ErrUnsupported. Errors show a URL
// with its password masked (Redact).
func Open(ctx context.Context, where string, o Options) (Store, error) {
	if scheme, ok := urlScheme(where); ok {
		if scheme == "postgres" || scheme == "postgresql" {
			return OpenPostgres(ctx, where, o)
		}
		return nil, fmt.Errorf("audit log %q: %s stores are not built in (give a file path for SQLite, or a postgres:// URL): %w",
			Redact(where), scheme, sandbox.ErrUnsupported)
	}
	s, err := OpenSQLite(ctx, where, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// DefaultPath is where the audit log lives by default: $AIRLOCK_HOME/audit.db,
// else $XDG_DATA_HOME/airlock/audit.db, else ~/.local/share/airlock/audit.db
// (the folders the image store uses).
func DefaultPath(getenv func(string) string) (string, error) {
	if h := getenv("AIRLOCK_HOME"); h != "" {
		return filepath.Join(h, "audit.db"), nil
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "airlock", "audit.db"), nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "airlock", "audit.db"), nil
	}
	return "", fmt.Errorf("none of AIRLOCK_HOME, XDG_DATA_HOME and HOME is set: %w", sandbox.ErrUnsupported)
}
