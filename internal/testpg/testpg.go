// Package testpg starts a real PostgreSQL server for tests: initdb into a
// fresh folder of its own, postgres listening on a unix socket in that
// folder only (no TCP port), password (SCRAM) authentication, and a fresh
// database for each test that asks (NewDatabase). The server is stopped
// and its folder removed when the test that started it ends.
//
// The binaries are looked for on PATH, then in Debian's
// /usr/lib/postgresql/VERSION/bin (the newest); where there are none, the
// test skips, or fails under CI (internal/testenv). PostgreSQL refuses to
// run as root: a test running as root runs it as the "postgres" user
// (Debian's postgresql package makes it). Servers run on Linux only.
package testpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// Need is what a test needs to start a server, as testenv.Require says it.
const Need = "PostgreSQL's server binaries, initdb and postgres (Debian: apt-get install postgresql)"

// User is the server's superuser, the one its URLs log in as.
const User = "airlock"

// Server is a PostgreSQL server that a test started.
type Server struct {
	dir      string // the folder: data/, the socket, the password file
	password string
	log      *testenv.Buffer // what the server logs
	dbs      atomic.Int64    // databases made, for their names
	pid      int             // the postmaster's
	stop     func() error
}

// Start starts a server for t, which stops it and removes its folder when
// it ends. It skips t (fails it under CI) when the binaries are missing.
func Start(t testing.TB) *Server {
	t.Helper()
	testenv.Require(t, "Linux, where testpg runs PostgreSQL", errOS)
	bin, err := Bin()
	testenv.Require(t, Need, err)
	s, err := start(bin)
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stopping PostgreSQL: %v\n%s", err, s.Log())
		}
	})
	return s
}

// Bin returns the folder of the PostgreSQL server binaries (initdb and
// postgres), or why there is none.
func Bin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range dirs {
		_, e1 := os.Stat(filepath.Join(dir, "initdb"))
		_, e2 := os.Stat(filepath.Join(dir, "postgres"))
		if e1 == nil && e2 == nil {
			return dir, nil
		}
	}
	return "", errors.New("no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin")
}

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.pid }

// Dir is the server's folder; its socket is in it.
func (s *Server) Dir() string { return s.dir }

// Password is User's password, which tests can look for where it must not
// show.
func (s *Server) Password() string { return s.password }

// Log returns what the server has logged so far.
func (s *Server) Log() string { return s.log.String() }

// URL returns the postgres:// URL of database db on the server, with
// User's password in it.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(User, s.password), Path: "/" + db,
		RawQuery: url.Values{"host": {s.dir}}.Encode()}
	return u.String()
}

// NewDatabase creates an empty database and returns its URL. It goes with
// the server.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test%d", s.dbs.Add(1))
	if err := s.Exec("postgres", "CREATE DATABASE "+name); err != nil {
		t.Fatalf("%v\n%s", err, s.Log())
	}
	return s.URL(name)
}

// Exec runs SQL statements on database db as User, for tests that set up
// or look at a database behind a store's back.
func (s *Server) Exec(db string, stmts ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL(db))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", db, err)
	}
	defer c.Close(context.Background())
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// newPassword returns a password with characters that a URL must escape,
// so that tests of masking see it in its escaped forms too.
func newPassword() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "pw-" + hex.EncodeToString(b) + "/@:%?"
}

// waitReady waits until the server at s accepts connections, or exited
// says it ended, or a minute has passed.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited before it accepted connections:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres accepted no connection within a minute (%v):\n%s", err, s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanEnv is the environment of initdb and postgres: none of the test's
// PG variables.
func cleanEnv() []string {
	env := []string{"LC_ALL=C", "TZ=UTC"}
	if p := os.Getenv("PATH"); p != "" {
		env = append(env, "PATH="+p)
	}
	return env
}

// trimLog keeps the end of a long log for an error message.
func trimLog(s string) string {
	const keep = 4000
	if len(s) > keep {
		return "…" + s[len(s)-keep:]
	}
	return strings.TrimSpace(s)
}
