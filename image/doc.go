// Package image builds and stores the read-only root file systems that
// sandboxes run in: the native backend bind-mounts one read-only as /, the
// docker backend imports one with `docker import`, and the gvisor backend
// uses one as the rootfs of its OCI bundle.
//
// # Store
//
// A Store is a folder with one sub-folder per image:
//
//	<store>/<name>/rootfs/         the root file system
//	<store>/<name>/manifest.json   what it holds and how it was built
//	<store>/.build-<name>-<rand>/  a build in progress (never an image)
//	<store>/.trash-<name>-<rand>/  an image being removed
//	<store>/.lock                  guards renames and cleaning
//
// DefaultDir finds the store: $AIRLOCK_HOME/images, else
// $XDG_DATA_HOME/airlock/images, else ~/.local/share/airlock/images.
// Store.Get reads one manifest and nothing else, so resolving an image name
// is cheap.
//
// # Building
//
// Store.Build bootstraps Debian with debootstrap --variant=minbase from the
// mirror that the host's apt configuration names (sources.list or deb822
// *.sources files; BuildOptions.Mirror overrides it), for the host's own
// release unless the definition names another. It then installs the
// definition's Debian packages with apt-get inside a chroot (with the
// release's -updates and -security suites when the host has them), purges
// the build-only packages the definition lists, installs its npm packages
// with the host's npm (scripts disabled) under /usr/local, writes its
// files, adds the user "sandbox" (1000:1000, home /tmp), and empties
// /workspace/input, /workspace/output, /tmp, /proc, /dev and /sys.
//
// Every image then loses apt and dpkg, has every setuid and setgid bit,
// file capability and device node removed, and is verified: a walk fails
// the build if any privileged or special file, package manager or compiler
// remains; a shell and each of the definition's checks must run in the
// image, read-only, as the sandbox user. The manifest records the Debian
// and npm package versions, the size, the content digest (see Sum), the
// environment and the definition.
//
// The commands run as PID 1 of fresh mount and PID namespaces, so the
// mounts of a chroot and every process of a build vanish when the build
// ends, is cancelled, or its process is killed. A build works in a locked
// .build- folder and renames it into place only when complete and
// verified, with the manifest already written, so an interrupted build
// never leaves an image that looks complete; the next build removes the
// folders of builds whose lock no live process holds.
//
// # Definitions
//
// A definition is a JSON object; every field is optional, and unknown
// fields are refused:
//
//	{
//	  "description": "free text",
//	  "suite": "bookworm",
//	  "packages": ["python3", "python3-numpy", "libfoo2=1.2-3"],
//	  "remove": ["gcc"],
//	  "npm": ["pptxgenjs@4.0.1"],
//	  "files": [
//	    {"path": "/etc/app.conf", "content": "key = 1\n"},
//	    {"path": "/usr/local/bin/tool", "source": "tool.sh", "mode": "0755"}
//	  ],
//	  "env": {"MPLBACKEND": "Agg"},
//	  "checks": ["python3 -c 'import numpy'"]
//	}
//
// suite is a Debian release (default: the host's). packages are Debian
// package names, each optionally pinned as name=version; package managers
// (apt, dpkg, npm, pip) are refused. remove lists packages purged after
// the install although others depend on them, for build tools that
// Debian's dependencies drag in. npm entries are registry package names
// with an optional @version or range (no URLs, git or file specs) and need
// "nodejs" among the packages. files are written after the packages: path
// is absolute and outside the folders that stay empty; exactly one of
// content (the text) and source (a host file, relative to the definition
// file) is set; mode is octal without setuid, setgid or sticky bits
// (default 0644). env is merged over the defaults PATH, LANG=C.UTF-8,
// HOME=/tmp and, with npm packages, NODE_PATH=/usr/local/lib/node_modules.
// checks are shell commands that must exit 0 in the finished image.
//
// The built-in definitions, such as "python", are embedded in this format
// (see Builtin); docs/IMAGES.md describes them for users.
package image
