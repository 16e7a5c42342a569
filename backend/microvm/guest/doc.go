// Package guest is the microvm backend's agent inside the virtual
// machine: the airlock binary itself, run by the guest kernel as its first
// process from an initramfs. It loads the kernel modules the machine
// needs, mounts the image's read-only disk, and then serves the host's
// requests over one multiplexed connection (package wire) by running a
// native sandbox (package native) inside the guest: the code runs as uid
// 1000 with no capabilities, no_new_privs, seccomp, Landlock and cgroup
// caps of the guest's kernel, so that code which gained root in the guest
// would still have a virtual machine to escape.
//
// A program that imports this package is its own guest agent: the
// package's init function takes over when the process is the guest's
// pid 1 started as Path.
package guest

// Path is where the agent lies in the initramfs, and so its argv[0]; the
// kernel runs it as init (rdinit=Path).
const Path = "/airlock-microvm-guest"

// ModulesDir holds the kernel modules in the initramfs, with a file
// ModulesOrder naming them one per line in load order.
const (
	ModulesDir   = "/modules"
	ModulesOrder = "/modules/order"
)

// PortName is the name of the virtio-serial port the host listens on.
const PortName = "airlock"

// VsockPort is the port the agent listens on when the host asks for the
// vsock transport (TransportParam=vsock on the kernel command line).
const VsockPort = 1024

// TransportParam is the kernel command line parameter that picks the
// transport: "serial" (the default) or "vsock".
const TransportParam = "airlock.transport"

// ImageDir is where the image's disk is mounted inside the guest.
const ImageDir = "/run/image"
