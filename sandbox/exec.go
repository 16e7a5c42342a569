package sandbox

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// killWait bounds how long Exec waits for a process it killed because its
// context ended.
const killWait = 30 * time.Second

// Exec starts a process in inst and waits for it, the way a blocking
// command runs. When ctx ends first, the process is killed (and what it
// started swept) and Exec returns its Result with ctx's error.
func Exec(ctx context.Context, inst Instance, spec ProcessSpec) (Result, error) {
	p, err := inst.Start(ctx, spec)
	if err != nil {
		return Result{ID: inst.ID()}, err
	}
	res, err := p.Wait(ctx)
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return res, err
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
	defer cancel()
	_ = p.Signal(kctx, syscall.SIGKILL)
	res, werr := p.Wait(kctx)
	if werr != nil {
		return res, errors.Join(ctx.Err(), werr)
	}
	return res, ctx.Err()
}
