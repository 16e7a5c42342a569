package main

import (
	"context"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// collectArtifacts runs /workspace/output through the artifact filter.
// With --output the accepted and sanitized files land there, never
// replacing a file there unless --overwrite; without it the files are only
// judged, so the Result still lists them.
func collectArtifacts(ctx context.Context, inst sandbox.Instance, o *runOptions) ([]sandbox.Artifact, error) {
	dir, err := inst.Output(ctx)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	arts, err := artifact.CollectTo(ctx, dir, artifact.Destination{Dir: o.output, Overwrite: o.overwrite}, o.policy.Artifacts)
	if arts == nil {
		arts = []sandbox.Artifact{}
	}
	return arts, err
}
