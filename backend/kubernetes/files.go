package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// files reaches a sandbox's files through the agent of its files
// container: each operation is one exec there (see package agent).
type files struct{ i *instance }

var _ sandbox.Files = files{}

func (i *instance) Files() sandbox.Files { return files{i} }

func toInfo(in dirfs.Info) sandbox.FileInfo {
	return sandbox.FileInfo{Path: in.Path, Name: in.Name, Size: in.Size, Mode: fs.FileMode(in.Mode), ModTime: in.ModTime, Target: in.Target}
}

// answer runs an operation whose answer is one JSON value.
func (f files) answer(ctx context.Context, stdin io.Reader, v any, op string, args ...string) error {
	var out bytes.Buffer
	if err := f.i.fileOp(ctx, stdin, &limitedWriter{w: &out, n: 64 << 20}, op, args...); err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		return fmt.Errorf("file %s: the agent's answer: %w", op, err)
	}
	return nil
}

// Put streams r into path, at most max bytes (the folder's cap when 0).
func (f files) Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	lim := f.i.policy.Limits
	cap := lim.DiskBytes
	if path == agent.InputDir || strings.HasPrefix(path, agent.InputDir+"/") {
		cap = lim.InputBytes
	}
	if max <= 0 || max > cap {
		max = cap
	}
	var in dirfs.Info
	// one byte over the cap tells the agent that there was more
	err := f.answer(ctx, io.LimitReader(r, max+1), &in, agent.FilePut, path, strconv.FormatInt(max, 10))
	return toInfo(in), err
}

// Get opens path for reading: the agent's answer, then the bytes as they
// come. Closing the reader ends the exec.
func (f files) Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	rc, first, err := f.i.streamOp(ctx, agent.FileGet, path, true)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	var in dirfs.Info
	if err := json.Unmarshal(first, &in); err != nil {
		rc.Close()
		return nil, sandbox.FileInfo{}, fmt.Errorf("get %s: the agent's answer: %w", path, err)
	}
	return rc, toInfo(in), nil
}

func (f files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var in dirfs.Info
	err := f.answer(ctx, nil, &in, agent.FileStat, path)
	return toInfo(in), err
}

func (f files) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	var ins []dirfs.Info
	if err := f.answer(ctx, nil, &ins, agent.FileList, path); err != nil {
		return nil, err
	}
	out := make([]sandbox.FileInfo, len(ins))
	for k, in := range ins {
		out[k] = toInfo(in)
	}
	return out, nil
}

func (f files) Mkdir(ctx context.Context, path string) error {
	return f.answer(ctx, nil, nil, agent.FileMkdir, path)
}

func (f files) Remove(ctx context.Context, path string) error {
	return f.answer(ctx, nil, nil, agent.FileRemove, path)
}

func (f files) Rename(ctx context.Context, from, to string) error {
	return f.answer(ctx, nil, nil, agent.FileRename, from, to)
}

// ArchiveOutput hands out /workspace/output as the agent's tar stream.
func (i *instance) ArchiveOutput(ctx context.Context) (io.ReadCloser, error) {
	rc, _, err := i.streamOp(ctx, agent.FileTar, agent.OutputDir, false)
	return rc, err
}

// streamOp starts a file operation whose answer is a stream: with a
// header, it reads the first line and returns it; the reader gives the
// rest. A failure before the stream starts is returned as the operation's
// error.
func (i *instance) streamOp(ctx context.Context, op, path string, header bool) (io.ReadCloser, []byte, error) {
	if err := i.alive(); err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr, pw := io.Pipe()
	s := &opStream{pr: pr, cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := i.fileOp(sctx, nil, pw, op, path)
		pw.CloseWithError(streamEnd(err))
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	s.r = br
	if !header {
		// wait for the first bytes, so that an error before them is the
		// operation's
		if _, err := br.Peek(1); err != nil && err != io.EOF {
			s.Close()
			return nil, nil, err
		}
		return s, nil, nil
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		s.Close()
		if err == io.EOF {
			err = fmt.Errorf("%s %s: no answer from the agent", op, path)
		}
		return nil, nil, err
	}
	return s, line, nil
}

// streamEnd is what a reader of an operation's stream sees at its end.
func streamEnd(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// opStream is the reading end of a streamed file operation.
type opStream struct {
	r      io.Reader
	pr     *io.PipeReader
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func (s *opStream) Read(p []byte) (int, error) { return s.r.Read(p) }

// Close ends the exec and waits for it.
func (s *opStream) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.pr.Close()
		s.wg.Wait()
	})
	return nil
}
