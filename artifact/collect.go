package artifact

import (
	"context"
	"os"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Destination is where Collect writes the files it lets out. It is the
// caller's choice, not a part of the sandbox's policy: the code inside
// cannot change it.
type Destination struct {
	// Dir is the host folder that receives accepted and sanitized files;
	// it is created if missing. "" decides only and writes nothing.
	Dir string
	// Overwrite lets an artifact replace an entry of the same name in Dir.
	// Without it such an artifact is rejected and the entry is left as it
	// was. Either way a symbolic link in Dir is never followed: with
	// Overwrite it is replaced by the file, not written through.
	Overwrite bool
}

// Collect is CollectTo with Destination{Dir: dst}: it never replaces a
// file that dst already holds.
func Collect(ctx context.Context, src *os.File, dst string, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	return CollectTo(ctx, src, Destination{Dir: dst}, p)
}
