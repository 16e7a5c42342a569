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
	"time"

	"github.com/airlock-sandbox/airlock/e2b"
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
cancelled, every sandbox is destroyed.`

// serveOptions are the parsed flags of airlock serve.
type serveOptions struct {
	addr, keysFile, backends, runtime string
	tlsCert, tlsKey                   string
	e2b                               bool
	pool                              listFlag
	maxSessions                       int
	quota                             session.Quota
	drain                             time.Duration
}

func parseServe(env *cliEnv, args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := newFlagSet(env, "serve", serveUsage)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "`HOST:PORT` to listen on")
	fs.StringVar(&o.keysFile, "keys-file", "", "`FILE` of API keys (default: AIRLOCK_API_KEYS)")
	fs.StringVar(&o.backends, "backends", "native", "comma-separated `NAMES` of the backends to serve; the first is the default")
	fs.StringVar(&o.runtime, "runtime", "", "with the docker backend: runc or runsc")
	fs.Var(&o.pool, "pool", "a warm pool, `BACKEND:IMAGE=SIZE` (repeatable), e.g. native:python=2; its sandboxes have the default policy")
	fs.Var(positiveInt{&o.maxSessions}, "max-sessions", "`NUMBER` of sessions alive at once (default 1024)")
	fs.Var(positiveInt{&o.quota.Sessions}, "tenant-sessions", "a tenant's sessions at once, `NUMBER` (default 64; a keys file line may set its own)")
	fs.Var(sizeFlag{&o.quota.MemoryBytes}, "tenant-memory", "a tenant's memory caps added up, `SIZE` (default 32GiB)")
	fs.Var(positiveFloat{&o.quota.CPUs}, "tenant-cpus", "a tenant's CPU quotas added up, `CORES` (default 64)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long running calls may take to finish on shutdown")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "`FILE` of the TLS certificate (PEM, chain first) to serve HTTPS with")
	fs.StringVar(&o.tlsKey, "tls-key", "", "`FILE` of the TLS certificate's private key (PEM)")
	fs.BoolVar(&o.e2b, "e2b", true, "serve the E2B-compatible API beside v1")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("takes no arguments, got %q: %w", fs.Arg(0), sandbox.ErrInvalid)
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
	return session.PoolSpec{Backend: backend, Image: img, Size: size}, nil
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
	m, err := session.New(ctx, session.Options{Backends: backends, DefaultBackend: names[0], Images: imageStoreLookup(env),
		MaxSessions: o.maxSessions, Quota: quota, Pools: pools, Logger: log})
	if err != nil {
		return fail(sandbox.ExitFailed, err)
	}
	defer m.Close(context.WithoutCancel(ctx))
	so := server.Options{Manager: m, Keys: keys, Logger: log}
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
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), TLSConfig: tlsConf}
	served := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	log.Info("serving", "addr", ln.Addr().String(), "backends", o.backends, "tenants_with_keys", keys.Len() > 0,
		"https", tlsConf != nil, "e2b", o.e2b)
	select {
	case err := <-served:
		return fail(sandbox.ExitFailed, err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "cause", context.Cause(ctx).Error())
	srv.Shutdown()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
	defer cancel()
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
