package testpg_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testpg"
	"github.com/jackc/pgx/v5"
)

// TestStartStop: a server serves fresh databases on a socket in its
// folder, to its password only, and once its test ends neither the
// server, nor any process of its group, nor its folder is left.
func TestStartStop(t *testing.T) {
	var dir string
	var pid int
	t.Run("server", func(t *testing.T) {
		s := testpg.Start(t)
		dir, pid = s.Dir(), s.PID()
		if _, err := os.Stat(filepath.Join(dir, ".s.PGSQL.5432")); err != nil {
			t.Errorf("no socket in the server's folder: %v", err)
		}
		a, b := s.NewDatabase(t), s.NewDatabase(t)
		if a == b {
			t.Errorf("two new databases at one URL: %s", a)
		}
		u, err := url.Parse(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Exec(strings.TrimPrefix(u.Path, "/"), "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1)"); err != nil {
			t.Error(err)
		}
		u.User = url.UserPassword(testpg.User, "wrong")
		if c, err := pgx.Connect(context.Background(), u.String()); err == nil {
			c.Close(context.Background())
			t.Error("a wrong password connected")
		}
	})
	if dir == "" {
		return // skipped
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server's folder %s is left: %v", dir, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the postmaster %d is left: %v", pid, err)
	}
	// Its children share its process group (they would have been
	// reparented).
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, pgrp, ...
		if len(f) > 2 && f[2] == strconv.Itoa(pid) {
			t.Errorf("a process of the server's group is left: %s", s)
		}
	}
}
