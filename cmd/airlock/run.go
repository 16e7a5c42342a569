package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

func init() {
	register("run", command{summary: "run a command or a script in a sandbox", run: runRun})
}

const runUsage = `run [flags] -- COMMAND [ARG...]
       airlock run [flags] --lang python|bash|node --code FILE   (FILE "-" reads stdin)

With AIRLOCK_URL set (and AIRLOCK_API_KEY), the run is a session of that airlock
serve: the inputs are uploaded, the output streams back, the accepted artifacts
are downloaded into --output, and the session is deleted; --runtime does not
apply, and --stdin passes at most 1MiB.

Exit status: the command's own; 124 timed out; 137 killed for memory; 125 airlock
failed; 2 the command line is wrong; 130 and 143 interrupted by SIGINT (Ctrl-C) and
SIGTERM, after the sandbox was destroyed.

On a terminal the command's control characters and escape sequences are shown as
caret text (ESC as ^[, a lone carriage return as ^M), plain colours excepted;
--raw passes them through.`

// runOptions are the parsed flags of airlock run.
type runOptions struct {
	backend, runtime, image, output, lang, code string
	inputs, envs                                listFlag
	json, strict, stdin, raw, overwrite         bool
	policy                                      sandbox.Policy
	cmd                                         []string
	// backendSet: --backend or AIRLOCK_BACKEND named one; a server
	// (AIRLOCK_URL) otherwise picks its default.
	backendSet bool
}

func parseRun(env *cliEnv, args []string) (*runOptions, error) {
	o := &runOptions{}
	fs := newFlagSet(env, "run", runUsage)
	def := env.getenv("AIRLOCK_BACKEND")
	if def == "" {
		def = "native"
	}
	l := &o.policy.Limits
	fs.StringVar(&o.backend, "backend", def, backendUsage)
	fs.StringVar(&o.runtime, "runtime", "", "with --backend docker: runc or runsc (env AIRLOCK_DOCKER_RUNTIME; default runc)")
	fs.StringVar(&o.image, "image", "host", `image: "host", a built image name, or a rootfs folder`)
	fs.Var(&o.inputs, "input", "`PATH[:NAME]` of a host file to put read-only at /workspace/input/NAME (repeatable)")
	fs.StringVar(&o.output, "output", "", "host `DIR` that receives the accepted files of /workspace/output")
	fs.BoolVar(&o.overwrite, "overwrite", false, "let an artifact replace a file of its name in --output (default: keep the file, reject the artifact)")
	fs.BoolVar(&o.policy.Artifacts.AllowHidden, "allow-hidden", false, "let out files and folders whose name starts with a dot (default: rejected)")
	fs.Var(durationFlag{&l.Timeout}, "timeout", "wall-clock limit, `DURATION` such as 30s or 2m (default 30s)")
	fs.Var(sizeFlag{&l.MemoryBytes}, "memory", "memory cap, no swap, a `SIZE` such as 512MiB (default 512MiB)")
	fs.Var(positiveFloat{&l.CPUs}, "cpus", "CPU quota in `CORES` (default 1)")
	fs.Var(positiveInt{&l.Pids}, "pids", "process and thread cap, a `NUMBER` (default 128)")
	fs.Var(sizeFlag{&l.DiskBytes}, "disk", "cap on /tmp + /workspace/output + /dev/shm together, a `SIZE` (default 256MiB)")
	fs.Var(sizeFlag{&l.OutputBytes}, "stdout-limit", "bytes kept of stdout and of stderr, each, a `SIZE` (default 1MiB)")
	fs.Var(sizeFlag{&l.InputBytes}, "input-limit", "cap on the --input files together, a `SIZE` (default 1GiB)")
	fs.Var(allowFlag{rules: &o.policy.Network.Allow}, "allow-host", "allow egress to `HOST[:PORT]`: example.com, *.example.com, example.com:8443,\nan address (10.1.2.3, [fd00::1]:8443) or a range (10.0.0.0/8:11434); repeatable")
	fs.Var(allowFlag{rules: &o.policy.Network.Allow, cidrOnly: true}, "allow-cidr", "allow egress to an address range, `CIDR[:PORT]`: 10.0.0.0/8, 10.1.2.3/32:11434, fd00::/8,\n[fd00::/8]:8443; repeatable")
	fs.Var(&o.envs, "env", "`K=V` to set inside (repeatable); no host variable enters otherwise")
	fs.BoolVar(&o.json, "json", false, "print the Result as JSON on stdout")
	fs.BoolVar(&o.strict, "strict", false, "refuse to run if this host can only give weaker layers")
	fs.BoolVar(&o.stdin, "stdin", false, "pass this process's stdin to the command (default: empty stdin)")
	fs.BoolVar(&o.raw, "raw", false, "on a terminal, pass the command's escape sequences through unchanged")
	fs.StringVar(&o.lang, "lang", "", "`LANGUAGE` of --code: python, bash or node")
	fs.StringVar(&o.code, "code", "", "script `FILE` to run with --lang (\"-\" reads stdin)")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	o.backendSet = fs.backendNamed()
	o.policy.Strict = o.strict
	for _, kv := range o.envs {
		k, v, err := sandbox.ParseEnv(kv)
		if err != nil {
			return nil, err
		}
		if o.policy.Env == nil {
			o.policy.Env = map[string]string{}
		}
		o.policy.Env[k] = v
	}
	if o.overwrite && o.output == "" {
		return nil, fmt.Errorf("--overwrite applies to --output DIR, which is not given: %w", sandbox.ErrInvalid)
	}
	var err error
	if o.cmd, err = o.command(env, fs.Args()); err != nil {
		return nil, err
	}
	if o.policy, err = o.policy.Normalize(); err != nil {
		return nil, err
	}
	return o, nil
}

// command is what to run: the arguments, or the --lang/--code script.
func (o *runOptions) command(env *cliEnv, args []string) ([]string, error) {
	if o.code == "" && o.lang == "" {
		if len(args) == 0 {
			return nil, fmt.Errorf("nothing to run: give a command after -- or --lang and --code: %w", sandbox.ErrInvalid)
		}
		return args, nil
	}
	if len(args) > 0 {
		return nil, fmt.Errorf("give either a command or --lang/--code, not both: %w", sandbox.ErrInvalid)
	}
	if o.code == "" {
		return nil, fmt.Errorf("--lang needs --code FILE: %w", sandbox.ErrInvalid)
	}
	if o.code == "-" && o.stdin {
		return nil, fmt.Errorf("--code - reads the script from stdin, so --stdin cannot pass it on: %w", sandbox.ErrInvalid)
	}
	var r io.Reader = env.stdin
	if o.code != "-" {
		f, err := os.Open(o.code)
		if err != nil {
			return nil, fmt.Errorf("--code: %w: %w", err, sandbox.ErrInvalid)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, session.MaxInlineCode+1))
	if err != nil {
		return nil, fmt.Errorf("--code: %w", err)
	}
	cmd, err := session.CodeCommand(o.lang, string(b))
	if err != nil {
		return nil, fmt.Errorf("--lang %s --code %s: %w", o.lang, o.code, err)
	}
	return cmd, nil
}

func runRun(ctx context.Context, env *cliEnv, args []string) int {
	if env.getenv(client.EnvURL) != "" {
		return runRemote(ctx, env, args)
	}
	o, inputs, m, err := prepareRun(ctx, env, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		env.errorf("airlock run: %s", errText(err))
		return exitUsage
	}
	defer m.Close(context.WithoutCancel(ctx))
	fail := func(err error) int { return runFailed(env, err) }
	if o.output != "" {
		if err := os.MkdirAll(o.output, 0o755); err != nil {
			return fail(fmt.Errorf("--output: %w", err))
		}
	}
	var stdout, stderr io.Writer
	var term *termsafe.Terminal
	if !o.json {
		stdout, stderr, term = commandStreams(env, o.raw)
	}
	proc := sandbox.ProcessSpec{Cmd: o.cmd, Stdout: stdout, Stderr: stderr}
	if o.stdin {
		proc.Stdin = env.stdin
	}
	res, err := m.RunOnce(ctx, session.OneShot{
		Create:  session.CreateOptions{Backend: o.backend, Image: o.image, Policy: o.policy},
		Inputs:  inputs,
		Process: proc,
		Output:  artifact.Destination{Dir: o.output, Overwrite: o.overwrite},
	})
	return finishRun(ctx, env, o, term, res, err)
}

// finishRun reports a one-shot run's end, wherever it ran: the
// interruption, the Result as JSON or lines on stderr, and the exit
// status.
func finishRun(ctx context.Context, env *cliEnv, o *runOptions, term *termsafe.Terminal, res sandbox.Result, err error) int {
	if term != nil {
		term.Flush()
	}
	if code, ok := interruption(ctx); ok {
		if err != nil && !errors.Is(err, context.Canceled) {
			env.errorf("airlock run: %s", errText(err))
		}
		env.errorf("airlock: interrupted")
		return code
	}
	if o.json && res.ID != "" {
		// a Result, even when airlock failed after the sandbox started
		if jerr := writeJSON(env.stdout, res); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		return runFailed(env, err)
	}
	if !o.json {
		reportRun(env, o, res)
	}
	return exitStatus(res)
}

// runFailed says why airlock run failed; it exits 125.
func runFailed(env *cliEnv, err error) int {
	env.errorf("airlock run: %s", errText(err))
	return sandbox.ExitFailed
}

// prepareRun reads the command line of airlock run: its flags, its
// inputs and its backend, and opens the session manager. Every error it
// returns is a usage error, or flag.ErrHelp after --help.
func prepareRun(ctx context.Context, env *cliEnv, args []string) (*runOptions, []session.Input, *session.Manager, error) {
	o, err := parseRun(env, args)
	if err != nil {
		return nil, nil, nil, err
	}
	inputs, err := session.ParseInputs(o.inputs)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--input: %w", err)
	}
	be, err := newBackend(env, o.backend, backendOptions{runtime: o.runtime})
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := newManager(ctx, env, be)
	if err != nil {
		return nil, nil, nil, err
	}
	return o, inputs, m, nil
}

// commandStreams returns where the command's stdout and stderr stream:
// airlock's own, each through a termsafe filter when it is a terminal
// (only tracked, not filtered, with raw). The Terminal is nil when neither
// is one. When stderr is one, airlock's own lines start afresh after the
// command's output (env.errorf).
func commandStreams(env *cliEnv, raw bool) (stdout, stderr io.Writer, term *termsafe.Terminal) {
	stdout, stderr = env.stdout, env.stderr
	outTTY, errTTY := env.terminal(env.stdout), env.terminal(env.stderr)
	if !outTTY && !errTTY {
		return stdout, stderr, nil
	}
	term = new(termsafe.Terminal)
	if outTTY {
		stdout = term.Writer(env.stdout, raw)
	}
	if errTTY {
		stderr = term.Writer(env.stderr, raw)
		env.term = term
	}
	return stdout, stderr, term
}

// writeJSON writes v as indented JSON. encoding/json escapes the C0
// controls in strings (ESC as \u001b); writeJSON also escapes DEL and the
// C1 controls U+0080 to U+009F, which it leaves as they are, so that no
// string in the output can act on a terminal.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, r := range string(b) {
		if r == 0x7f || r >= 0x80 && r <= 0x9f {
			fmt.Fprintf(&out, `\u%04x`, r)
			continue
		}
		out.WriteRune(r)
	}
	out.WriteByte('\n')
	_, err = io.WriteString(w, out.String())
	return err
}

// reportRun tells, on stderr, what the streamed output cannot show.
func reportRun(env *cliEnv, o *runOptions, res sandbox.Result) {
	l := o.policy.Limits
	say := func(format string, a ...any) { env.errorf("airlock: "+format, a...) }
	if res.StdoutTruncated {
		say("stdout truncated at %s", sandbox.FormatSize(l.OutputBytes))
	}
	if res.StderrTruncated {
		say("stderr truncated at %s", sandbox.FormatSize(l.OutputBytes))
	}
	if res.TimedOut {
		say("timed out after %s; everything the command started was killed", l.Timeout)
	}
	if res.OOMKilled {
		say("killed for memory: the cap is %s", sandbox.FormatSize(l.MemoryBytes))
	}
	if res.PidsLimitHit {
		say("a fork failed at the pids cap of %d", l.Pids)
	}
	for _, w := range res.Weakened {
		say("weaker layer on this host: %s", w)
	}
	for _, a := range res.Artifacts {
		if a.Verdict != sandbox.VerdictAccepted {
			say("artifact %s: %s (%s)", a.Path, a.Verdict, a.Reason)
		}
	}
}

// exitStatus applies the CLI contract.
func exitStatus(res sandbox.Result) int {
	switch {
	case res.TimedOut:
		return sandbox.ExitTimeout
	case res.OOMKilled && res.Signal == "SIGKILL":
		return sandbox.ExitOOM
	}
	return res.ExitCode
}
