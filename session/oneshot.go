package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Input is a host file to put read-only at /workspace/input/NAME.
type Input struct {
	Path, Name string
}

// ParseInputs reads specs of the form PATH[:NAME] (NAME defaults to the
// file's base name) and checks that each names a regular file and that no
// two share a name. Errors wrap sandbox.ErrInvalid.
func ParseInputs(specs []string) ([]Input, error) {
	var out []Input
	seen := map[string]bool{}
	for _, s := range specs {
		path, name := s, filepath.Base(s)
		if i := strings.LastIndexByte(s, ':'); i > 0 {
			path, name = s[:i], s[i+1:]
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
			return nil, fmt.Errorf("input %q: name %q must be a plain file name (no '/', '..'): %w", s, name, sandbox.ErrInvalid)
		}
		for _, r := range name {
			if r < 0x20 || r == 0x7f {
				return nil, fmt.Errorf("input %q: name has a control character: %w", s, sandbox.ErrInvalid)
			}
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w: %w", s, err, sandbox.ErrInvalid)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("input %q: not a regular file: %w", s, sandbox.ErrInvalid)
		}
		if seen[name] {
			return nil, fmt.Errorf("two files named %q: %w", name, sandbox.ErrInvalid)
		}
		seen[name] = true
		out = append(out, Input{path, name})
	}
	return out, nil
}

// MaxInlineCode bounds code run by CodeCommand: it travels as one
// argument.
const MaxInlineCode = 120 << 10

// interpreters maps a language to the command that runs code given inline.
var interpreters = map[string][]string{
	"python":     {"python3", "-c"},
	"bash":       {"bash", "-c"},
	"node":       {"node", "-e"},
	"javascript": {"node", "-e"},
}

// CodeCommand is the command that runs code in lang (python, bash, node
// or javascript) as one process. Errors wrap sandbox.ErrInvalid.
func CodeCommand(lang, code string) ([]string, error) {
	interp, ok := interpreters[lang]
	if !ok {
		return nil, fmt.Errorf("language %q: want python, bash or node: %w", lang, sandbox.ErrInvalid)
	}
	if len(code) > MaxInlineCode {
		return nil, fmt.Errorf("code over %s; put it in a file and run it by path: %w", sandbox.FormatSize(MaxInlineCode), sandbox.ErrInvalid)
	}
	if strings.ContainsRune(code, 0) {
		return nil, fmt.Errorf("code contains a NUL byte: %w", sandbox.ErrInvalid)
	}
	return append(append([]string(nil), interp...), code), nil
}

// OneShot is a session that runs one process: airlock run.
type OneShot struct {
	Create  CreateOptions
	Inputs  []Input
	Process sandbox.ProcessSpec
	// Output receives the accepted artifacts; Dir "" judges them only.
	Output artifact.Destination
}

// RunOnce creates a session, puts the inputs, runs the process, runs the
// output folder through the artifact filter and destroys the session,
// whatever happens in between: an error, or ctx ending. The Result is
// returned as far as it got, with the error.
func (m *Manager) RunOnce(ctx context.Context, o OneShot) (res sandbox.Result, err error) {
	s, err := m.Create(ctx, o.Create)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := m.end(context.WithoutCancel(ctx), s, "its one command ended"); derr != nil && err == nil {
			err = derr
		}
	}()
	for _, in := range o.Inputs {
		f, err := os.Open(in.Path)
		if err != nil {
			return res, fmt.Errorf("input %s: %w", in.Path, err)
		}
		_, err = s.Put(ctx, "/workspace/input/"+in.Name, f, 0)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("input %s: %w", in.Name, err)
		}
	}
	res, err = s.Exec(ctx, o.Process)
	if err != nil {
		return res, err
	}
	res.Artifacts, err = s.Collect(ctx, o.Output)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = ctx.Err()
	}
	return res, err
}
