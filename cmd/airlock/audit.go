package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

func init() {
	register("audit", command{summary: "show the audit log that airlock serve writes", run: runAudit})
}

const auditUsage = `audit [--db PATH|URL] [--tenant T] [--since DURATION] [--limit N] [--json]

Prints the last records of the audit log, oldest first: every session, process,
code call, egress decision and artifact verdict of every tenant, or of one. The
log is read from the file or the PostgreSQL database airlock serve writes (its
--audit-db), read-only, while the server runs or not. --json prints
{"records": [...]} as GET /v1/audit does.`

// auditOptions are the parsed flags of airlock audit.
type auditOptions struct {
	db, tenant string
	since      sandbox.Duration
	limit      int
	json       bool
}

func parseAudit(env *cliEnv, args []string) (*auditOptions, error) {
	o := &auditOptions{}
	fs := newFlagSet(env, "audit", auditUsage)
	fs.StringVar(&o.db, "db", "", "the audit log: an SQLite file's `PATH`, or a postgres:// URL (default $AIRLOCK_HOME/audit.db, else ~/.local/share/airlock/audit.db)")
	fs.StringVar(&o.tenant, "tenant", "", "show only this `TENANT`'s records")
	fs.Var(durationFlag{&o.since}, "since", "show only the records of the last `DURATION` (1h, 30m, 2h30m)")
	fs.Var(positiveInt{&o.limit}, "limit", fmt.Sprintf("show the last `N` records (default %d, at most %d)", audit.DefaultLimit, audit.MaxLimit))
	fs.BoolVar(&o.json, "json", false, "print the records as JSON")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("takes no arguments, got %q: %w", fs.Arg(0), sandbox.ErrInvalid)
	}
	if o.limit > audit.MaxLimit {
		return nil, fmt.Errorf("--limit: %d is over %d: %w", o.limit, audit.MaxLimit, sandbox.ErrInvalid)
	}
	if o.db == "" {
		p, err := audit.DefaultPath(env.getenv)
		if err != nil {
			return nil, fmt.Errorf("--db: no default (%v); give a path: %w", err, sandbox.ErrInvalid)
		}
		o.db = p
	}
	return o, nil
}

func runAudit(ctx context.Context, env *cliEnv, args []string) int {
	o, err := parseAudit(env, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		env.errorf("airlock audit: %s", errText(err))
		return exitUsage
	}
	store, err := audit.Open(ctx, o.db, audit.Options{ReadOnly: true})
	if err != nil {
		env.errorf("airlock audit: %s", errText(err))
		return sandbox.ExitFailed
	}
	defer store.Close()
	f := audit.Filter{Tenant: o.tenant, Limit: o.limit, Last: true}
	if o.since > 0 {
		f.Since = time.Now().Add(-time.Duration(o.since))
	}
	recs, err := store.List(ctx, f)
	if err != nil {
		env.errorf("airlock audit: %s", errText(err))
		return sandbox.ExitFailed
	}
	if o.json {
		if err := writeJSON(env.stdout, api.AuditList{Records: recs}); err != nil {
			env.errorf("airlock audit: %v", err)
			return sandbox.ExitFailed
		}
		return 0
	}
	if len(recs) == 0 {
		env.errorf("airlock audit: no records in %s match", audit.Redact(o.db))
		return 0
	}
	if err := writeAuditTable(env.stdout, recs); err != nil {
		env.errorf("airlock audit: %v", err)
		return sandbox.ExitFailed
	}
	return 0
}

// writeAuditTable prints records as a table. Every field a tenant's code
// can set is escaped (shown), so that none can break a line, forge a row
// or drive the terminal.
func writeAuditTable(w io.Writer, recs []api.AuditRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tTENANT\tKIND\tSESSION\tWHAT\tRESULT")
	for _, r := range recs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Time.UTC().Format(time.RFC3339), shown(r.Tenant), shown(r.Kind),
			shown(r.Session), shown(r.What), shown(auditResult(r)))
	}
	return tw.Flush()
}

// auditResult says in a few words how a record's action ended.
func auditResult(r api.AuditRecord) string {
	var parts []string
	if r.Kind == session.EventExec || r.Kind == session.EventCode {
		parts = append(parts, "exit "+strconv.Itoa(r.ExitCode))
	}
	if r.TimedOut {
		parts = append(parts, "timed out")
	}
	if r.OOMKilled {
		parts = append(parts, "killed for memory")
	}
	if r.PidsLimitHit {
		parts = append(parts, "pids limit hit")
	}
	if r.DurationMS > 0 {
		parts = append(parts, time.Duration(r.DurationMS*float64(time.Millisecond)).Round(time.Millisecond/10).String())
	}
	if r.Bytes > 0 {
		parts = append(parts, sandbox.FormatSize(r.Bytes))
	}
	if r.Detail != "" {
		parts = append(parts, r.Detail)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// shown escapes what is not printable text (controls, tabs, newlines,
// invalid UTF-8, Unicode format characters such as bidi overrides) and
// backslashes and quotes, as Go's strconv.QuoteToGraphic does; "" is "-".
func shown(s string) string {
	if s == "" {
		return "-"
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
