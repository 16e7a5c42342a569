package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// maxRemoteStdin bounds what --stdin passes to a server's session: it
// travels inside the exec request's body.
const maxRemoteStdin = 1 << 20

// runRemote is airlock run as a client of the airlock serve that
// AIRLOCK_URL names (client.RunOnce does the work), with the same flags,
// output and exit statuses as a local run.
func runRemote(ctx context.Context, env *cliEnv, args []string) int {
	o, err := parseRun(env, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var inputs []session.Input
	if err == nil {
		inputs, err = session.ParseInputs(o.inputs)
	}
	if err == nil && o.runtime != "" {
		err = fmt.Errorf("--runtime does not apply to a run on a server (%s): %w", client.EnvURL, sandbox.ErrInvalid)
	}
	var c *client.Client
	if err == nil {
		c, err = client.FromEnv(env.getenv, client.Options{UserAgent: "airlock-cli"})
	}
	if err != nil {
		env.errorf("airlock run: %s", errText(err))
		return exitUsage
	}
	defer c.Close()
	fail := func(err error) int { return runFailed(env, err) }
	req := api.Exec{Cmd: o.cmd}
	if o.stdin {
		b, err := io.ReadAll(io.LimitReader(env.stdin, maxRemoteStdin+1))
		if err != nil {
			return fail(fmt.Errorf("--stdin: %w", err))
		}
		if len(b) > maxRemoteStdin {
			return fail(fmt.Errorf("--stdin: over %s, the most a run on a server passes", sandbox.FormatSize(maxRemoteStdin)))
		}
		req.Stdin = string(b)
	}
	one := client.OneShot{Session: api.CreateSession{Image: o.image, Policy: &o.policy}, Exec: req}
	if o.backendSet {
		one.Session.Backend = o.backend
	}
	for _, in := range inputs {
		one.Inputs = append(one.Inputs, client.Input{Path: in.Path, Name: in.Name})
	}
	if o.output != "" {
		p, err := artifact.OpenPlacer(artifact.Destination{Dir: o.output, Overwrite: o.overwrite})
		if err != nil {
			return fail(fmt.Errorf("--output: %w", err))
		}
		defer p.Close()
		one.Save = p.Save
	}
	var term *termsafe.Terminal
	if !o.json {
		var stdout, stderr io.Writer
		stdout, stderr, term = commandStreams(env, o.raw)
		one.Output = client.Output{Stdout: client.ToWriter(stdout), Stderr: client.ToWriter(stderr)}
	}
	res, err := c.RunOnce(ctx, one)
	return finishRun(ctx, env, o, term, res, err)
}
