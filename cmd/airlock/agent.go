package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/agent"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/airlock-sandbox/airlock/tools"
)

func init() {
	register("agent", command{summary: "run a task with a model that calls the sandbox's tools (agent replay FILE re-runs a transcript)", run: runAgent})
}

const agentUsage = `agent [flags] "TASK"
       airlock agent replay [flags] TRANSCRIPT

The model is any OpenAI-compatible chat-completions endpoint with tool calling:
OPENAI_BASE_URL (or --base-url) and --model name it, OPENAI_API_KEY is its key
(read from the environment only; it never enters the sandbox, the transcript or
the output). The task and the --input files' names, sizes and first rows go to the
model; it calls run_code, run_command, write_file, read_file, list_files and
list_artifacts in one session; the run ends when it answers or a limit is reached.
Accepted artifacts land in --output, the transcript (JSONL) in --transcript.
With AIRLOCK_URL set (and AIRLOCK_API_KEY), the session is one of that airlock
serve, through its HTTP API; the key never reaches the model or the transcript.

Exit status: 0 the model answered; 3 a limit ended the run (the summary says
which); 4 the model endpoint failed (down, refused, too slow, not a chat
completion); 125 airlock failed; 2 the command line is wrong; 130 and 143
interrupted. agent replay: 0 every observation is the same, 1 some differ.`

// agentOptions are the parsed flags of airlock agent.
type agentOptions struct {
	backend, image, output, skills, transcript, baseURL, model string
	price, prices                                              string
	inputs                                                     listFlag
	json, overwrite, plan, noStream, vision                    bool
	maxSteps, subSteps, retries                                int
	maxTime, modelTimeout                                      sandbox.Duration
	maxTokens, subTokens                                       int64
	maxCost                                                    float64
	policy                                                     sandbox.Policy
	task                                                       string
	// backendSet: --backend or AIRLOCK_BACKEND named one; a server
	// (AIRLOCK_URL) otherwise picks its default.
	backendSet bool
}

func parseAgent(env *cliEnv, args []string) (*agentOptions, error) {
	o := &agentOptions{maxSteps: agent.DefaultMaxSteps, subSteps: agent.DefaultSubMaxSteps, maxTime: sandbox.Duration(agent.DefaultMaxTime),
		modelTimeout: sandbox.Duration(5 * time.Minute), retries: 2}
	o.policy.Limits.Timeout = sandbox.Duration(time.Minute)
	fs := newFlagSet(env, "agent", agentUsage)
	def := env.getenv("AIRLOCK_BACKEND")
	if def == "" {
		def = "native"
	}
	l := &o.policy.Limits
	fs.StringVar(&o.backend, "backend", def, backendUsage)
	fs.StringVar(&o.image, "image", "python", `image: a built image name, "host", or a rootfs folder`)
	fs.Var(&o.inputs, "input", "`PATH[:NAME]` of a host file to put read-only at /workspace/input/NAME (repeatable)")
	fs.StringVar(&o.output, "output", "", "host `DIR` that receives the accepted artifacts at the end")
	fs.BoolVar(&o.overwrite, "overwrite", false, "let an artifact replace a file of its name in --output")
	fs.StringVar(&o.skills, "skills", "", "`DIR` whose subfolders holding a SKILL.md are put read-only at "+agent.SkillsDir+"/NAME")
	fs.StringVar(&o.model, "model", env.getenv("OPENAI_MODEL"), "the model's `NAME` at the endpoint (env OPENAI_MODEL)")
	fs.StringVar(&o.baseURL, "base-url", env.getenv("OPENAI_BASE_URL"), "the endpoint's `URL`, e.g. http://127.0.0.1:8080/v1 (env OPENAI_BASE_URL)")
	fs.BoolVar(&o.noStream, "no-stream", false, "ask for whole answers instead of streamed ones")
	fs.BoolVar(&o.vision, "vision", false, "the model takes images: figures go back to it as images")
	fs.BoolVar(&o.plan, "plan", false, "split the task into subtasks, each run by a sub-agent with its own budget")
	fs.Var(positiveInt{&o.maxSteps}, "max-steps", "model calls in all, a `NUMBER`")
	fs.Var(durationFlag{&o.maxTime}, "max-time", "wall time of the run, a `DURATION`")
	fs.Var(positiveInt64{&o.maxTokens}, "max-tokens", "prompt and completion tokens in all, a `NUMBER` (default no limit)")
	fs.Var(positiveFloat{&o.maxCost}, "max-cost", "cost in US `DOLLARS`; needs --price or --prices (default no limit)")
	fs.Var(positiveInt{&o.subSteps}, "sub-steps", "with --plan: model calls of one sub-agent, a `NUMBER`")
	fs.Var(positiveInt64{&o.subTokens}, "sub-tokens", "with --plan: tokens of one sub-agent, a `NUMBER` (default no limit)")
	fs.StringVar(&o.price, "price", "", "`PRICES` in dollars per million tokens: input=N,output=N[,cached=N]")
	fs.StringVar(&o.prices, "prices", "", "price table `FILE`: JSON of model names (or \"*\") to {input, cached_input, output}")
	fs.StringVar(&o.transcript, "transcript", "", "JSONL transcript `FILE` (default DIR/transcript.jsonl with --output)")
	fs.Var(durationFlag{&o.modelTimeout}, "model-timeout", "how long one answer of the model may take, a `DURATION`")
	fs.IntVar(&o.retries, "retries", 2, "times a model request that got no answer (no connection, 429, 5xx) is sent again")
	fs.Var(durationFlag{&l.Timeout}, "timeout", "wall-clock limit of one tool call, a `DURATION`")
	fs.Var(sizeFlag{&l.MemoryBytes}, "memory", "the sandbox's memory cap, a `SIZE` (default 512MiB)")
	fs.Var(sizeFlag{&l.DiskBytes}, "disk", "the sandbox's writable space, a `SIZE` (default 256MiB)")
	fs.BoolVar(&o.json, "json", false, "print a machine-readable report on stdout instead of the progress and the answer")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() != 1 || strings.TrimSpace(fs.Arg(0)) == "":
		return nil, fmt.Errorf("give the task as one argument, in quotes: %w", sandbox.ErrInvalid)
	case o.model == "":
		return nil, fmt.Errorf("--model (or OPENAI_MODEL) names no model: %w", sandbox.ErrInvalid)
	case o.baseURL == "":
		return nil, fmt.Errorf("no endpoint: set OPENAI_BASE_URL or --base-url (e.g. http://127.0.0.1:8080/v1): %w", sandbox.ErrInvalid)
	case o.price != "" && o.prices != "":
		return nil, fmt.Errorf("give --price or --prices, not both: %w", sandbox.ErrInvalid)
	case o.overwrite && o.output == "":
		return nil, fmt.Errorf("--overwrite applies to --output DIR, which is not given: %w", sandbox.ErrInvalid)
	case o.retries < 0:
		return nil, fmt.Errorf("--retries: %d is negative: %w", o.retries, sandbox.ErrInvalid)
	}
	o.task = fs.Arg(0)
	o.backendSet = fs.backendNamed()
	if o.transcript == "" && o.output != "" {
		o.transcript = filepath.Join(o.output, "transcript.jsonl")
	}
	var err error
	o.policy, err = o.policy.Normalize()
	return o, err
}

// positiveInt64 is an int64 flag that must be above zero when given.
type positiveInt64 struct{ v *int64 }

func (f positiveInt64) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return fmt.Sprint(*f.v)
}

func (f positiveInt64) Set(s string) error {
	var n int
	if err := (positiveInt{&n}).Set(s); err != nil {
		return err
	}
	*f.v = int64(n)
	return nil
}

// agentPrices reads --price or --prices; nil when neither is given.
func agentPrices(o *agentOptions) (*agent.Prices, error) {
	var p agent.Prices
	var err error
	switch {
	case o.price != "":
		p, err = agent.ParsePrices(o.price)
	case o.prices != "":
		p, err = agent.LoadPrices(o.prices, o.model)
	default:
		return nil, nil
	}
	return &p, err
}

// agentInputs reads --input and --skills.
func agentInputs(o *agentOptions) ([]agent.Input, []agent.Skill, error) {
	in, err := session.ParseInputs(o.inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("--input: %w", err)
	}
	var inputs []agent.Input
	for _, i := range in {
		inputs = append(inputs, agent.Input{Path: i.Path, Name: i.Name})
	}
	var skills []agent.Skill
	if o.skills != "" {
		if skills, err = agent.LoadSkills(o.skills); err != nil {
			return nil, nil, fmt.Errorf("--skills: %w", err)
		}
	}
	return inputs, skills, nil
}

// agentBox is the agent's session: of this process's Manager, or, with
// AIRLOCK_URL set, of that airlock serve.
type agentBox struct {
	sb      tools.Sandbox
	env     tools.Env // describes the image for the model
	session agent.SessionInfo
	close   func() // ends the session if the run did not, and what held it
}

// agentSandbox creates the agent's session. backendSet says that the
// backend was named (--backend, AIRLOCK_BACKEND, a transcript); a server
// otherwise picks its default.
func agentSandbox(ctx context.Context, env *cliEnv, backend string, backendSet bool, image string, pol sandbox.Policy) (agentBox, error) {
	if env.getenv(client.EnvURL) != "" {
		return remoteAgentSandbox(ctx, env, backend, backendSet, image, pol)
	}
	be, err := newBackend(env, backend, backendOptions{})
	if err != nil {
		return agentBox{}, err
	}
	m, err := newManager(ctx, env, be)
	if err != nil {
		return agentBox{}, err
	}
	s, err := m.Create(ctx, session.CreateOptions{Image: image, Policy: pol, Metadata: agentMetadata})
	if err != nil {
		m.Close(context.WithoutCancel(ctx))
		return agentBox{}, err
	}
	te := tools.Env{Image: image, Limits: s.Policy().Limits}
	if store := imageStore(env); store != nil {
		if img, err := store.Get(image); err == nil {
			te.About = img.Manifest.Definition.Description
		}
	}
	return agentBox{sb: tools.Local(s), env: te, session: agent.SessionInfo{ID: s.ID(), Backend: backend, Image: image, Policy: s.Policy()},
		close: func() { m.Close(context.WithoutCancel(ctx)) }}, nil
}

var agentMetadata = map[string]string{"surface": "agent"}

// remoteAgentSandbox creates the agent's session on the airlock serve
// that AIRLOCK_URL names (AIRLOCK_API_KEY its key). The server's image
// store is its own: the model is told the image's name only.
func remoteAgentSandbox(ctx context.Context, env *cliEnv, backend string, backendSet bool, image string, pol sandbox.Policy) (agentBox, error) {
	c, err := client.FromEnv(env.getenv, client.Options{UserAgent: "airlock-agent"})
	if err != nil {
		return agentBox{}, err
	}
	req := api.CreateSession{Image: image, Policy: &pol, Metadata: agentMetadata}
	if backendSet {
		req.Backend = backend
	}
	s, err := c.CreateSession(ctx, req)
	if err != nil {
		c.Close()
		return agentBox{}, err
	}
	pol.Limits = s.Limits
	sb := tools.Remote(c, s.ID)
	return agentBox{sb: sb, env: tools.Env{Image: s.Image, Limits: s.Limits},
		session: agent.SessionInfo{ID: s.ID, Backend: s.Backend, Image: s.Image, Policy: pol},
		close: func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = sb.Destroy(dctx)
			c.Close()
		}}, nil
}

func runAgent(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) > 0 && args[0] == "replay" {
		return runAgentReplay(ctx, env, args[1:])
	}
	o, err := parseAgent(env, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	usage := func(err error) int {
		env.errorf("airlock agent: %s", errText(err))
		return exitUsage
	}
	if err != nil {
		return usage(err)
	}
	prices, err := agentPrices(o)
	if err != nil {
		return usage(err)
	}
	if o.maxCost > 0 && prices == nil {
		return usage(fmt.Errorf("--max-cost needs --price or --prices: %w", sandbox.ErrInvalid))
	}
	inputs, skills, err := agentInputs(o)
	if err != nil {
		return usage(err)
	}
	fail := func(err error) int {
		env.errorf("airlock agent: %s", errText(err))
		return sandbox.ExitFailed
	}
	if o.output != "" {
		if err := os.MkdirAll(o.output, 0o755); err != nil {
			return fail(fmt.Errorf("--output: %w", err))
		}
	}
	var transcript *os.File
	if o.transcript != "" {
		mode := os.O_WRONLY | os.O_CREATE | os.O_EXCL // an earlier run's transcript is kept, as artifacts are
		if o.overwrite {
			mode = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		}
		if transcript, err = os.OpenFile(o.transcript, mode, 0o600); err != nil {
			return fail(fmt.Errorf("--transcript: %w", err))
		}
		defer transcript.Close()
	}
	box, err := agentSandbox(ctx, env, o.backend, o.backendSet, o.image, o.policy)
	if err != nil {
		return fail(err)
	}
	defer box.close()
	box.env.Vision = o.vision
	cfg := agent.Config{Task: o.task, Sandbox: box.sb, Env: box.env, Inputs: inputs, Skills: skills, Session: box.session,
		Model: agent.ModelOptions{BaseURL: o.baseURL, APIKey: env.getenv("OPENAI_API_KEY"), Model: o.model, Stream: !o.noStream,
			Timeout: time.Duration(o.modelTimeout), Retries: retriesOption(o.retries)},
		Limits: agent.Limits{MaxSteps: o.maxSteps, MaxTime: time.Duration(o.maxTime), MaxTokens: o.maxTokens, MaxCost: o.maxCost},
		Prices: prices, Plan: o.plan, SubLimits: agent.Limits{MaxSteps: o.subSteps, MaxTokens: o.subTokens},
		Output: artifact.Destination{Dir: o.output, Overwrite: o.overwrite}}
	if transcript != nil {
		cfg.Transcript = transcript
	}
	if !o.json {
		cfg.Progress = env.stderr
	}
	rep, err := agent.Run(ctx, cfg)
	if o.json {
		if jerr := writeJSON(env.stdout, agentJSON{Report: rep, Transcript: o.transcript, Output: o.output}); jerr != nil && err == nil {
			err = jerr
		}
	} else if rep.Answer != "" {
		fmt.Fprintln(env.stdout, rep.Answer)
	}
	if code, ok := interruption(ctx); ok {
		env.errorf("airlock: interrupted")
		return code
	}
	switch {
	case errors.Is(err, agent.ErrModel):
		env.errorf("airlock agent: %s", errText(err))
		return exitModel
	case err != nil:
		return fail(err)
	case rep.Stop != agent.StopAnswered:
		return exitLimit
	}
	return 0
}

// Exit statuses of airlock agent.
const (
	exitLimit = 3
	exitModel = 4
)

// retriesOption maps --retries to agent.ModelOptions.Retries, where 0 is
// the default and a negative number none.
func retriesOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// agentJSON is airlock agent --json's report.
type agentJSON struct {
	agent.Report
	Transcript string `json:"transcript,omitempty"`
	Output     string `json:"output,omitempty"`
}

const replayUsage = `agent replay [flags] TRANSCRIPT

Runs the tool calls a transcript recorded, in order, in a fresh sandbox set up as the
recorded one was (the same image, policy, inputs and skills; --input and --skills
name other files), and compares each observation with the recorded one. The model is
not asked. Exit status: 0 every observation is the same, 1 some differ, 125 airlock
failed, 2 the command line is wrong.`

func runAgentReplay(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "agent replay", replayUsage)
	var inputs listFlag
	var skillsDir string
	var asJSON bool
	fs.Var(&inputs, "input", "`PATH[:NAME]` to put in for the recorded input NAME (repeatable)")
	fs.StringVar(&skillsDir, "skills", "", "`DIR` of skills to put in instead of the recorded ones")
	fs.BoolVar(&asJSON, "json", false, "print the comparison as JSON on stdout")
	err := fs.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	usage := func(err error) int {
		env.errorf("airlock agent replay: %s", errText(err))
		return exitUsage
	}
	if err != nil {
		return usage(err)
	}
	if fs.NArg() != 1 {
		return usage(fmt.Errorf("give one transcript file: %w", sandbox.ErrInvalid))
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return usage(fmt.Errorf("transcript: %w: %w", err, sandbox.ErrInvalid))
	}
	recs, err := agent.ReadTranscript(f)
	f.Close()
	if err != nil {
		return usage(fmt.Errorf("transcript %s: %w: %w", fs.Arg(0), err, sandbox.ErrInvalid))
	}
	start := agent.FirstStart(recs)
	if start == nil {
		return usage(fmt.Errorf("transcript %s has no start record: %w", fs.Arg(0), sandbox.ErrInvalid))
	}
	o := &agentOptions{inputs: inputs, skills: skillsDir}
	in, skills, err := agentInputs(o)
	if err != nil {
		return usage(err)
	}
	if skillsDir == "" {
		skills = nil
	}
	box, err := agentSandbox(ctx, env, start.Session.Backend, start.Session.Backend != "", start.Session.Image, start.Session.Policy)
	if err != nil {
		env.errorf("airlock agent replay: %s", errText(err))
		return sandbox.ExitFailed
	}
	defer box.close()
	box.env.Vision = start.Vision
	cfg := agent.ReplayConfig{Records: recs, Sandbox: box.sb, Env: box.env, Inputs: in, Skills: skills}
	if !asJSON {
		cfg.Progress = env.stderr
	}
	rep, err := agent.Replay(ctx, cfg)
	if code, ok := interruption(ctx); ok {
		env.errorf("airlock: interrupted")
		return code
	}
	if err != nil {
		env.errorf("airlock agent replay: %s", errText(err))
		return sandbox.ExitFailed
	}
	if asJSON {
		if err := writeJSON(env.stdout, rep); err != nil {
			return sandbox.ExitFailed
		}
	}
	if len(rep.Differs) > 0 {
		return 1
	}
	return 0
}
