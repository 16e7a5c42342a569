package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func init() {
	register("image", command{summary: "build, list and remove sandbox images", run: runImage})
}

const imageUsage = `usage:
  airlock image build NAME [--file image.json] [--mirror URL] [--replace] [--verbose]
  airlock image ls [--json]
  airlock image rm NAME
  airlock image kernel         fetch the microvm backend's guest kernel (Debian's
                               linux-image-cloud-amd64) into the store

Images live in $AIRLOCK_HOME/images, else $XDG_DATA_HOME/airlock/images,
else ~/.local/share/airlock/images. Without --file, NAME is a built-in
definition (%s). See docs/IMAGES.md for the definition format.
`

func runImage(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 {
		printImageUsage(env.stderr)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "build":
		return imageBuild(ctx, env, rest)
	case "ls", "list":
		return imageList(env, rest)
	case "rm", "remove":
		return imageRemove(env, rest)
	case "kernel":
		return imageKernel(ctx, env, rest)
	case "-h", "-help", "--help", "help":
		printImageUsage(env.stdout)
		return 0
	}
	env.errorf("airlock image: unknown subcommand %q", sub)
	printImageUsage(env.stderr)
	return exitUsage
}

func printImageUsage(w io.Writer) {
	fmt.Fprintf(w, imageUsage, strings.Join(image.BuiltinNames(), ", "))
}

// parseImageFlags parses flags given before or after the positional
// arguments and returns the positional arguments.
func parseImageFlags(fs *flagSet, args []string) ([]string, error) {
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	pos := []string{}
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if err := fs.parse(fs.Args()[1:]); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// imageArgs parses a subcommand's arguments and checks their count. It
// returns the exit status to end with when they are not to be run: 0 after
// -h, 2 after a usage error.
func imageArgs(env *cliEnv, fs *flagSet, args []string, want int, what string) ([]string, int, bool) {
	pos, err := parseImageFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err == nil && len(pos) != want {
		err = errors.New(what)
	}
	if err != nil {
		env.errorf("airlock %s: %s", fs.Name(), errText(err))
		return nil, exitUsage, false
	}
	return pos, 0, true
}

func openImageStore(env *cliEnv) (*image.Store, error) {
	dir, err := image.DefaultDir(env.getenv)
	if err != nil {
		return nil, err
	}
	return image.OpenStore(dir)
}

func imageBuild(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "image build", "image build NAME [--file image.json] [--mirror URL] [--replace] [--verbose]")
	file := fs.String("file", "", "build from this JSON definition instead of a built-in one")
	mirror := fs.String("mirror", "", "Debian mirror URL (default: the one the host's apt configuration names)")
	replace := fs.Bool("replace", false, "replace an existing image of the same name")
	verbose := fs.Bool("verbose", false, "print the output of debootstrap, apt-get and npm")
	pos, code, ok := imageArgs(env, fs, args, 1, "want exactly one image NAME")
	if !ok {
		return code
	}
	name := pos[0]
	var def image.Definition
	var err error
	if *file != "" {
		def, err = image.LoadDefinition(*file)
	} else {
		def, err = image.Builtin(name)
	}
	if err != nil {
		return imageFailure(env, "build", err)
	}
	store, err := openImageStore(env)
	if err != nil {
		return imageFailure(env, "build", err)
	}
	opts := image.BuildOptions{Mirror: *mirror, Replace: *replace, Progress: env.stderr}
	if *verbose {
		opts.Log = env.stderr
	}
	img, err := store.Build(ctx, name, def, opts)
	if err != nil {
		if code, ok := interruption(ctx); ok {
			env.errorf("airlock image build: interrupted; no image was stored")
			return code
		}
		return imageFailure(env, "build", err)
	}
	fmt.Fprintln(env.stdout, img.Dir)
	return 0
}

func imageList(env *cliEnv, args []string) int {
	fs := newFlagSet(env, "image ls", "image ls [--json]")
	asJSON := fs.Bool("json", false, "print the images and their manifests as JSON")
	if _, code, ok := imageArgs(env, fs, args, 0, "takes no arguments"); !ok {
		return code
	}
	store, err := openImageStore(env)
	if err != nil {
		return imageFailure(env, "ls", err)
	}
	imgs, err := store.List()
	if err != nil {
		return imageFailure(env, "ls", err)
	}
	if *asJSON {
		if imgs == nil {
			imgs = []*image.Image{}
		}
		if err := writeJSON(env.stdout, imgs); err != nil {
			return imageFailure(env, "ls", err)
		}
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tPACKAGES\tBUILT\tDIGEST")
	for _, img := range imgs {
		m := img.Manifest
		fmt.Fprintf(tw, "%s\t%s\t%d+%d\t%s\t%s\n", img.Name, image.FormatSize(m.SizeBytes),
			len(m.Packages), len(m.NPMPackages), m.Built.Format("2006-01-02 15:04"), shortDigest(m.Digest))
	}
	if err := tw.Flush(); err != nil {
		return imageFailure(env, "ls", err)
	}
	return 0
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

func imageRemove(env *cliEnv, args []string) int {
	fs := newFlagSet(env, "image rm", "image rm NAME")
	pos, code, ok := imageArgs(env, fs, args, 1, "want exactly one image NAME")
	if !ok {
		return code
	}
	store, err := openImageStore(env)
	if err != nil {
		return imageFailure(env, "rm", err)
	}
	if err := store.Remove(pos[0]); err != nil {
		return imageFailure(env, "rm", err)
	}
	return 0
}

func imageKernel(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "image kernel", "image kernel")
	if _, code, ok := imageArgs(env, fs, args, 0, "takes no arguments"); !ok {
		return code
	}
	store, err := openImageStore(env)
	if err != nil {
		return imageFailure(env, "kernel", err)
	}
	k, err := image.FetchKernel(ctx, store.KernelDir(), env.stderr)
	if err != nil {
		return imageFailure(env, "kernel", err)
	}
	fmt.Fprintf(env.stdout, "%s\t%s %s\t%s\n", k.Release, k.Package, k.Version, k.Dir)
	return 0
}

// imageFailure prints err and returns the exit status: 2 for bad input
// (a usage error), 125 for the rest.
func imageFailure(env *cliEnv, sub string, err error) int {
	env.errorf("airlock image %s: %s", sub, errText(err))
	if errors.Is(err, sandbox.ErrInvalid) {
		return exitUsage
	}
	return sandbox.ExitFailed
}
