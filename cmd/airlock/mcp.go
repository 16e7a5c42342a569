package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/mcp"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/airlock-sandbox/airlock/tools"
)

func init() {
	register("mcp", command{summary: "serve the sandbox's tools to MCP clients, over stdio or streamable HTTP", run: runMCP})
}

const mcpUsage = `mcp [--http ADDR [--keys-file FILE]] [flags]

Without --http, serves one MCP client on stdin and stdout (an MCP host starts
"airlock mcp" as a command); the sessions it made are destroyed when it goes away.
With --http, serves streamable HTTP at ADDR; API keys are those of airlock serve
(--keys-file, or AIRLOCK_API_KEYS), each key's tenant seeing only its sessions;
without keys it listens on loopback only. Sessions end at their idle timeout.`

func runMCP(ctx context.Context, env *cliEnv, args []string) int {
	var addr, keysFile, backend, image string
	var idle sandbox.Duration = sandbox.Duration(15 * time.Minute)
	var vision bool
	var pol sandbox.Policy
	fs := newFlagSet(env, "mcp", mcpUsage)
	def := env.getenv("AIRLOCK_BACKEND")
	if def == "" {
		def = "native"
	}
	fs.StringVar(&addr, "http", "", "serve streamable HTTP on `HOST:PORT` instead of stdio")
	fs.StringVar(&keysFile, "keys-file", "", "with --http: `FILE` of API keys (default: AIRLOCK_API_KEYS)")
	fs.StringVar(&backend, "backend", def, "backend of the sessions (env AIRLOCK_BACKEND)")
	fs.StringVar(&image, "image", "python", `image of the sessions: a built image name, "host", or a rootfs folder`)
	fs.Var(durationFlag{&idle}, "idle", "a session ends after it is idle this long, a `DURATION`")
	fs.Var(durationFlag{&pol.Limits.Timeout}, "timeout", "wall-clock limit of one call, a `DURATION` (default 30s)")
	fs.Var(sizeFlag{&pol.Limits.MemoryBytes}, "memory", "a session's memory cap, a `SIZE` (default 512MiB)")
	fs.BoolVar(&vision, "vision", true, "say that images come back as images (set false for clients that show none)")
	err := fs.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	usage := func(err error) int {
		env.errorf("airlock mcp: %s", errText(err))
		return exitUsage
	}
	if err != nil {
		return usage(err)
	}
	if fs.NArg() > 0 {
		return usage(fmt.Errorf("takes no arguments, got %q: %w", fs.Arg(0), sandbox.ErrInvalid))
	}
	if keysFile != "" && addr == "" {
		return usage(fmt.Errorf("--keys-file applies to --http: %w", sandbox.ErrInvalid))
	}
	var keys *server.Keys
	if addr != "" {
		if keys, err = server.LoadKeys(keysFile, env.getenv, session.Quota{}); err != nil {
			return usage(err)
		}
		if err := server.CheckListen(addr, keys); err != nil {
			return usage(err)
		}
	}
	fail := func(err error) int {
		env.errorf("airlock mcp: %s", errText(err))
		return sandbox.ExitFailed
	}
	be, err := newBackend(env, backend, backendOptions{})
	if err != nil {
		return usage(err)
	}
	log := slog.New(slog.NewJSONHandler(env.stderr, nil))
	m, err := session.New(ctx, session.Options{Backends: map[string]sandbox.Backend{be.Name(): be}, Images: imageStoreLookup(env), Logger: log})
	if err != nil {
		return fail(err)
	}
	defer m.Close(context.WithoutCancel(ctx))
	te := tools.Env{Image: image, Vision: vision}
	if store := imageStore(env); store != nil {
		if img, err := store.Get(image); err == nil {
			te.About = img.Manifest.Definition.Description
		}
	}
	srv, err := mcp.New(mcp.Options{Manager: m, Session: session.CreateOptions{Image: image, Policy: pol, IdleTimeout: time.Duration(idle),
		Metadata: map[string]string{"surface": "mcp"}}, Env: te, Version: versionString(env), Logger: log})
	if err != nil {
		return usage(err)
	}
	defer srv.Close(context.WithoutCancel(ctx))
	if addr == "" {
		if err := srv.ServeStdio(ctx, os.Stdin, os.Stdout); err != nil {
			return fail(err)
		}
		return 0
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: srv.Handler(keys), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("serving MCP", "addr", ln.Addr().String(), "tenants_with_keys", keys.Len() > 0)
	select {
	case err := <-served:
		return fail(err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return 0
}
