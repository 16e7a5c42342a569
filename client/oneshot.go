package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Input is a host file to put read-only at /workspace/input/Name.
type Input struct {
	Path, Name string
}

// SaveFunc places one artifact that may leave the sandbox (accepted or
// sanitized) read from r under its path a.Path (relative to
// /workspace/output). It returns a reason when it did not place the file
// (its name is taken, say): the artifact is then reported rejected with
// that reason. An error stops the run.
type SaveFunc func(ctx context.Context, a sandbox.Artifact, r io.Reader) (reason string, err error)

// OneShot is a session that runs one command, as `airlock run` does.
type OneShot struct {
	Session api.CreateSession
	Inputs  []Input
	Exec    api.Exec
	// Output receives the command's output as it comes; with neither func
	// set the command runs without a stream.
	Output Output
	// Save places the artifacts that may leave; nil downloads none (the
	// Result still lists every verdict).
	Save SaveFunc
}

// destroyWait bounds the destroy at the end of RunOnce, which runs even
// when ctx has ended.
const destroyWait = 30 * time.Second

// RunOnce creates a session, puts the inputs, runs the command, judges
// /workspace/output and downloads what may leave through Save, and
// destroys the session whatever happened in between: an error, or ctx
// ending. The Result, with its Artifacts, is returned as far as it got.
func (c *Client) RunOnce(ctx context.Context, o OneShot) (res sandbox.Result, err error) {
	s, err := c.CreateSession(ctx, o.Session)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyWait)
		defer cancel()
		if derr := c.DeleteSession(dctx, s.ID); derr != nil && err == nil {
			err = derr
		}
	}()
	for _, in := range o.Inputs {
		if err := c.putInput(ctx, s.ID, in); err != nil {
			return res, err
		}
	}
	if o.Output.Stdout != nil || o.Output.Stderr != nil {
		res, err = c.ExecStreaming(ctx, s.ID, o.Exec, o.Output)
	} else {
		res, err = c.Exec(ctx, s.ID, o.Exec)
	}
	if err != nil {
		return res, err
	}
	res.Artifacts, err = c.Collect(ctx, s.ID, o.Save)
	return res, err
}

func (c *Client) putInput(ctx context.Context, id string, in Input) error {
	f, err := os.Open(in.Path)
	if err != nil {
		return fmt.Errorf("input %s: %w", in.Path, err)
	}
	defer f.Close()
	if _, err := c.PutFile(ctx, id, "input/"+in.Name, f); err != nil {
		return fmt.Errorf("input %s: %w", in.Name, err)
	}
	return nil
}

// Collect lists the verdicts of the session's /workspace/output and
// downloads each file that may leave through save (nil downloads none).
// The download is judged again on the server; its verdict is the one
// reported.
func (c *Client) Collect(ctx context.Context, id string, save SaveFunc) ([]sandbox.Artifact, error) {
	arts, err := c.Artifacts(ctx, id)
	if err != nil {
		return arts, err
	}
	if arts == nil {
		arts = []sandbox.Artifact{}
	}
	if save == nil {
		return arts, nil
	}
	for i := range arts {
		a := &arts[i]
		if a.Verdict == sandbox.VerdictRejected {
			continue
		}
		f, err := c.GetFile(ctx, id, "output/"+a.Path)
		var ae *api.Error
		switch {
		case errors.As(err, &ae) && (ae.Status == 403 || ae.Status == 404):
			// judged again, or gone, since the listing
			a.Verdict, a.Reason, a.ServeHint = sandbox.VerdictRejected, ae.Message, ""
			continue
		case err != nil:
			return arts, err
		}
		a.Verdict, a.Reason = f.Verdict, f.Reason
		why, err := save(ctx, *a, f)
		f.Close()
		if err != nil {
			return arts, fmt.Errorf("artifact %s: %w", a.Path, err)
		}
		if why != "" {
			a.Verdict, a.Reason, a.ServeHint = sandbox.VerdictRejected, why, ""
		}
	}
	return arts, nil
}

// SaveTo is a SaveFunc that writes artifacts beneath the host folder dir,
// creating it and the folders on the way. Nothing is written above dir
// (the folder is opened as an os.Root), and a file already there is never
// replaced: the artifact is rejected instead. A file is written under a
// temporary name and linked into place once complete.
func SaveTo(dir string) SaveFunc {
	return func(ctx context.Context, a sandbox.Artifact, r io.Reader) (string, error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			return "", err
		}
		defer root.Close()
		if d := path.Dir(a.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return "", err
			}
		}
		if _, err := root.Lstat(a.Path); err == nil {
			return "not written: the output folder already has an entry of this name, which is kept", nil
		}
		tmp := path.Join(path.Dir(a.Path), ".airlock-"+requestID()+".tmp")
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return "", err
		}
		defer root.Remove(tmp)
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		if err := root.Link(tmp, a.Path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return "not written: the output folder already has an entry of this name, which is kept", nil
			}
			return "", err
		}
		return "", nil
	}
}
