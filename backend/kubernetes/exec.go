package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Containers of a sandbox Pod.
const (
	sandboxContainer = "sandbox"
	filesContainer   = "files"
)

// agentInFiles is where the agent lies in its own image, which the files
// container runs.
const agentInFiles = "/airlock-k8s-agent"

// execStream runs argv in a container of pod over the exec API and copies
// its stdin, stdout and stderr until it ends or ctx does. It speaks
// WebSocket to the API server and falls back to SPDY when the server
// does not upgrade to it. A command that exits non-zero gives an error
// with ExitStatus (see exitStatus).
func (b *Backend) execStream(ctx context.Context, pod, container string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := b.client.CoreV1().RESTClient().Post().Namespace(b.ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil}, scheme.ParameterCodec)
	u := req.URL()
	ws, err := remotecommand.NewWebSocketExecutor(b.config, "GET", u.String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.config, "POST", u)
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// exitStatus is the exit status an exec's error reports, and whether it
// reports one (the command ran and ended).
func exitStatus(err error) (int, bool) {
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), true
	}
	return 0, false
}

// fileOp runs one agent file operation in the files container: stdin (if
// any) is its input; what it prints goes to stdout. A failure the agent
// reports is mapped to sandbox's sentinels.
func (i *instance) fileOp(ctx context.Context, stdin io.Reader, stdout io.Writer, op string, args ...string) error {
	if err := i.alive(); err != nil {
		return err
	}
	for _, a := range args {
		// an exec's argv ends each argument at its first NUL
		if strings.IndexByte(a, 0) >= 0 {
			return command.FileError(&dirfs.Error{Kind: dirfs.Invalid, Msg: fmt.Sprintf("path %q: contains a NUL byte", a)})
		}
	}
	var stderr bytes.Buffer
	argv := append([]string{agentInFiles, "file", op}, args...)
	if stdin != nil {
		// client-go may go on copying stdin after the exec ended: it then
		// reads no more of the caller's reader
		r := &endingReader{r: stdin}
		defer r.end()
		stdin = r
	}
	err := i.b.execStream(ctx, i.pod, filesContainer, argv, stdin, stdout, &limitedWriter{w: &stderr, n: 64 << 10})
	if err == nil {
		return nil
	}
	if _, exited := exitStatus(err); exited {
		var e dirfs.Error
		if jerr := json.Unmarshal(bytes.TrimSpace(stderr.Bytes()), &e); jerr == nil && e.Msg != "" {
			return command.FileError(&e)
		}
		return fmt.Errorf("file %s %s: %v: %s", op, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return i.streamError(fmt.Sprintf("file %s", op), err)
}

// limitedWriter keeps at most n bytes and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(int64(len(p)), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// endingReader reads r until end is called, then gives io.EOF.
type endingReader struct {
	r     io.Reader
	ended atomic.Bool
}

func (e *endingReader) Read(p []byte) (int, error) {
	if e.ended.Load() {
		return 0, io.EOF
	}
	return e.r.Read(p)
}

func (e *endingReader) end() { e.ended.Store(true) }
