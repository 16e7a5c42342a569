package image

import "io"

// BuildOptions are the settings of one build.
type BuildOptions struct {
	// Mirror is the Debian archive to use, such as "http://HOST/debian".
	// Empty means the mirror that the host's own apt configuration names.
	Mirror string
	// Replace lets the build replace an existing image of the same name;
	// without it such a build is refused before it starts.
	Replace bool
	// Progress receives one line per step and periodic counts; nil
	// discards them.
	Progress io.Writer
	// Log receives the full output of the commands the build runs
	// (debootstrap, apt-get, dpkg, npm); nil discards it. The last lines
	// are part of the error when a command fails either way.
	Log io.Writer
}
