package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/e2b"
	"github.com/airlock-sandbox/airlock/metrics"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
)

func init() {
	register("serve", command{summary: "serve the HTTP API: sessions, files, exec, code, artifacts", run: runServe})
}

const serveUsage = `serve [--addr 127.0.0.1:8080] [--keys-file FILE] [--tls-cert FILE --tls-key FILE] [flags]

Keys files have one key per line: TENANT KEY [sessions=N] [memory=SIZE] [cpus=N].
AIRLOCK_API_KEYS holds the same lines, separated by ';', when --keys-file is not
given. Without keys the server serves one tenant, "default", on loopback only.
Beyond loopback it serves HTTPS only, with the certificate and key given.
The E2B-compatible API is served on the same address (--e2b=false turns it
off): set E2B_API_KEY to an API key and E2B_API_URL and E2B_SANDBOX_URL to
this server's URL.
SIGTERM or SIGINT stops it: new requests get 503, running calls finish or are
cancelled, every sandbox is destroyed.

Every session, process, code call, egress decision and artifact verdict is
written to the audit log (--audit-db: an SQLite file, or a PostgreSQL database
that several servers share, named by a postgres:// URL) before the call that
made it answers; GET /v1/audit reads a tenant's own records, airlock audit reads
them all. GET /metrics serves Prometheus metrics without authentication: counts and
latencies only, no tenant, session, command or host in them.`

// serveOptions are the parsed flags of airlock serve.
type serveOptions struct {
	addr, keysFile, backends, runtime string
	tlsCert, tlsKey                   string
	e2b                               bool
	pool                              listFlag
	maxSessions                       int
	quota                             session.Quota
	drain                             time.Duration
	rate                              float64
	burst                             int
	headerTimeout, bodyTimeout        time.Duration
	auditDB, metricsAddr              string
	auditRetention                    time.Duration
	auditFsync                        bool
}

func parseServe(env *cliEnv, args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := newFlagSet(env, "serve", serveUsage)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "`HOST:PORT` to listen on")
	fs.StringVar(&o.keysFile, "keys-file", "", "`FILE` of API keys (default: AIRLOCK_API_KEYS)")
	fs.StringVar(&o.backends, "backends", "native", "comma-separated `NAMES` of the backends to serve; the first is the default")
	fs.StringVar(&o.runtime, "runtime", "", "with the docker backend: runc or runsc")
	fs.Var(&o.pool, "pool", "a warm pool, `BACKEND:IMAGE=SIZE` (repeatable), e.g. native:python=2; its sandboxes have the default policy, and the python image's have the interpreter started with pandas, numpy and matplotlib imported")
	fs.Var(positiveInt{&o.maxSessions}, "max-sessions", "`NUMBER` of sessions alive at once (default 1024)")
	fs.Var(positiveInt{&o.quota.Sessions}, "tenant-sessions", "a tenant's sessions at once, `NUMBER` (default 64; a keys file line may set its own)")
	fs.Var(sizeFlag{&o.quota.MemoryBytes}, "tenant-memory", "a tenant's memory caps added up, `SIZE` (default 32GiB)")
	fs.Var(positiveFloat{&o.quota.CPUs}, "tenant-cpus", "a tenant's CPU quotas added up, `CORES` (default 64)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long running calls may take to finish on shutdown")
	fs.Var(positiveFloat{&o.rate}, "rate", "requests a second each key may send, sustained, a `NUMBER` (default 50)")
	fs.Var(positiveInt{&o.burst}, "rate-burst", "requests each key may send at once above the rate, a `NUMBER` (default 100)")
	fs.DurationVar(&o.headerTimeout, "header-timeout", 10*time.Second, "how long a client may take to send a request's headers")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", 30*time.Second, "how long a client may take to send a JSON body")
	fs.StringVar(&o.auditDB, "audit-db", "", "the audit log: an SQLite file's `PATH`, a postgres:// URL (a PostgreSQL database that several servers may share), or none (default $AIRLOCK_HOME/audit.db, else ~/.local/share/airlock/audit.db)")
	o.auditRetention = 720 * time.Hour
	fs.Var(zeroOrDuration{&o.auditRetention}, "audit-retention", "how long audit records are kept, a `DURATION`; 0 keeps them for ever")
	fs.BoolVar(&o.auditFsync, "audit-fsync", false, "sync every audit commit to the disk, so that records survive a power loss, not only a killed server")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve GET /metrics on this `HOST:PORT` of its own instead of the API's listener, or none")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "`FILE` of the TLS certificate (PEM, chain first) to serve HTTPS with")
	fs.StringVar(&o.tlsKey, "tls-key", "", "`FILE` of the TLS certificate's private key (PEM)")
	fs.BoolVar(&o.e2b, "e2b", true, "serve the E2B-compatible API beside v1")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	if o.auditDB == "" {
		p, err := audit.DefaultPath(env.getenv)
		if err != nil {
			return nil, fmt.Errorf("--audit-db: no default (%v); give a path, a URL or none: %w", err, sandbox.ErrInvalid)
		}
		o.auditDB = p
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("takes no arguments, got %q: %w", fs.Arg(0), sandbox.ErrInvalid)
	}
	if o.headerTimeout <= 0 || o.bodyTimeout <= 0 {
		return nil, fmt.Errorf("--header-timeout and --body-timeout must be above zero: %w", sandbox.ErrInvalid)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, fmt.Errorf("give --tls-cert and --tls-key together: %w", sandbox.ErrInvalid)
	}
	if o.quota.Sessions == 0 {
		o.quota.Sessions = 64
	}
	if o.quota.MemoryBytes == 0 {
		o.quota.MemoryBytes = 32 << 30
	}
	if o.quota.CPUs == 0 {
		o.quota.CPUs = 64
	}
	return o, nil
}

// parsePool reads one --pool value.
func parsePool(v string) (session.PoolSpec, error) {
	where, n, ok := strings.Cut(v, "=")
	backend, img, ok2 := strings.Cut(where, ":")
	size, err := strconv.Atoi(n)
	if !ok || !ok2 || err != nil || size < 1 || size > 256 || backend == "" || img == "" {
		return session.PoolSpec{}, fmt.Errorf("--pool %q: want BACKEND:IMAGE=SIZE, SIZE 1 to 256: %w", v, sandbox.ErrInvalid)
	}
	ps := session.PoolSpec{Backend: backend, Image: img, Size: size}
	if img == "python" {
		// the data image's sessions wait with the interpreter started and
		// the data libraries imported
		ps.Warm = session.WarmPython(session.DataPreload)
	}
	return ps, nil
}

func runServe(ctx context.Context, env *cliEnv, args []string) int {
	o, err := parseServe(env, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		env.errorf("airlock serve: %s", errText(err))
		return exitUsage
	}
	fail := func(code int, err error) int {
		env.errorf("airlock serve: %s", errText(err))
		return code
	}
	keys, err := server.LoadKeys(o.keysFile, env.getenv, o.quota)
	if err != nil {
		return fail(exitUsage, err)
	}
	if err := server.CheckListen(o.addr, keys); err != nil {
		return fail(exitUsage, err)
	}
	var tlsConf *tls.Config
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fail(exitUsage, fmt.Errorf("--tls-cert/--tls-key: %v: %w", err, sandbox.ErrInvalid))
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	} else if err := server.CheckPlain(o.addr); err != nil {
		return fail(exitUsage, err)
	}
	backends := map[string]sandbox.Backend{}
	names := strings.Split(o.backends, ",")
	for _, name := range names {
		be, err := newBackend(env, name, backendOptions{runtime: o.runtime})
		if err != nil {
			return fail(exitUsage, err)
		}
		backends[be.Name()] = be
	}
	var pools []session.PoolSpec
	for _, v := range o.pool {
		ps, err := parsePool(v)
		if err != nil {
			return fail(exitUsage, err)
		}
		pools = append(pools, ps)
	}
	log := slog.New(slog.NewJSONHandler(env.stderr, nil))
	quota := func(tenant string) session.Quota {
		if t, ok := keys.Tenant(tenant); ok {
			return t.Quota
		}
		return o.quota
	}
	met := metrics.New()
	observers := []session.Observer{met}
	var reader server.AuditReader
	if o.auditDB != "none" {
		store, err := audit.Open(ctx, o.auditDB, audit.Options{Fsync: o.auditFsync})
		if err != nil {
			return fail(sandbox.ExitFailed, err)
		}
		defer store.Close()
		reader = store
		observers = append([]session.Observer{audit.NewRecorder(store, audit.RecorderOptions{Logger: log, OnError: met.AuditError})}, observers...)
		pctx, stopPruning := context.WithCancel(context.WithoutCancel(ctx))
		var pruner sync.WaitGroup
		pruner.Go(func() { audit.Retain(pctx, store, audit.RetainOptions{Keep: o.auditRetention, Logger: log}) })
		defer pruner.Wait()
		defer stopPruning()
	}
	m, err := session.New(ctx, session.Options{Backends: backends, DefaultBackend: names[0], Images: imageStoreLookup(env),
		MaxSessions: o.maxSessions, Quota: quota, Pools: pools, Logger: log, Observer: session.Observers(observers...)})
	if err != nil {
		return fail(sandbox.ExitFailed, err)
	}
	defer m.Close(context.WithoutCancel(ctx))
	met.WatchManager(m)
	extra := map[string]http.Handler{}
	if o.metricsAddr == "" {
		extra["GET /metrics"] = met.Handler()
	}
	so := server.Options{Manager: m, Keys: keys, Logger: log, Audit: reader, Extra: extra,
		RateLimit: o.rate, RateBurst: o.burst, BodyTimeout: o.bodyTimeout}
	if o.e2b {
		so.E2B = &e2b.Options{}
	}
	srv, err := server.New(so)
	if err != nil {
		return fail(sandbox.ExitFailed, err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fail(sandbox.ExitFailed, err)
	}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	hs := &http.Server{Handler: met.Instrument(srv), ReadHeaderTimeout: o.headerTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: errLog, TLSConfig: tlsConf}
	served := make(chan error, 2)
	go func() {
		if tlsConf != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	metricsAt := "the API's listener"
	if o.metricsAddr != "" && o.metricsAddr != "none" {
		mln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			_ = hs.Close()
			return fail(sandbox.ExitFailed, fmt.Errorf("--metrics-addr: %w", err))
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", met.Handler())
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
		go func() { served <- ms.Serve(mln) }()
		defer ms.Close()
		metricsAt = mln.Addr().String()
	} else if o.metricsAddr == "none" {
		metricsAt = "none"
	}
	log.Info("serving", "addr", ln.Addr().String(), "backends", o.backends, "tenants_with_keys", keys.Len() > 0,
		"audit_db", audit.Redact(o.auditDB), "metrics", metricsAt, "https", tlsConf != nil, "e2b", o.e2b)
	select {
	case err := <-served:
		return fail(sandbox.ExitFailed, err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "cause", context.Cause(ctx).Error())
	srv.Shutdown()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
	defer cancel()
	// new calls are answered 503 while the running ones finish; then the
	// listener closes
	if err := srv.Drain(dctx); err != nil {
		log.Warn("calls still running at the end of the drain; they are cancelled", "err", err)
	}
	if err := hs.Shutdown(dctx); err != nil {
		log.Warn("calls still running at the end of the drain; they are cancelled", "err", err)
		_ = hs.Close()
	}
	if err := m.Close(context.WithoutCancel(ctx)); err != nil {
		log.Warn("destroying the sessions", "err", err)
	}
	log.Info("stopped")
	return 0
}
