// Package testsession gives the tests of the surfaces over sessions (the
// tools, the agent loop, the MCP server, the examples) a session Manager
// on the native backend that resolves the built python image, closed when
// the test ends.
package testsession

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// Image is the image the sessions run.
const Image = testimage.Name

// Manager returns a Manager over the native backend whose image lookup
// holds the python image, or skips t (fails it under CI) when the host
// lacks root or the image. edit, when set, changes the options first.
func Manager(t testing.TB, edit func(*session.Options)) *session.Manager {
	t.Helper()
	testenv.Require(t, "root: sessions run native sandboxes as root here", testenv.Root())
	o := session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})},
		Images: testimage.Store(t)}
	if edit != nil {
		edit(&o)
	}
	m, err := session.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("closing the session manager: %v", err)
		}
	})
	return m
}

// Python creates a session of the python image with pol, destroyed when
// the test ends.
func Python(t testing.TB, m *session.Manager, pol sandbox.Policy) *session.Session {
	t.Helper()
	s, err := m.Create(context.Background(), session.CreateOptions{Image: Image, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy(context.Background()) })
	return s
}
