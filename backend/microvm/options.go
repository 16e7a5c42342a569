package microvm

import (
	"log/slog"
	"time"
)

// Accelerators, for Options.Accel.
const (
	AccelAuto = ""    // KVM when /dev/kvm runs a guest, else TCG
	AccelKVM  = "kvm" // hardware virtualisation; fails where KVM cannot run
	AccelTCG  = "tcg" // QEMU's own translator: slow, but runs anywhere
)

// Transports, for Options.Transport.
const (
	TransportAuto   = ""       // vsock where the host has /dev/vhost-vsock, else serial
	TransportSerial = "serial" // a virtio-serial port
	TransportVsock  = "vsock"  // virtio-vsock, through vhost-vsock
)

// Options configure the microvm backend.
type Options struct {
	// QEMU is the qemu-system-x86_64 binary; default: the one in PATH.
	QEMU string
	// KernelDir is a folder of guest kernels (image.FetchKernel fills one);
	// the highest release is used. Default: the image store's.
	KernelDir string
	// CacheDir keeps the initramfs and the images' disks. Default: .microvm
	// in the image store.
	CacheDir string
	// Accel picks the accelerator; AIRLOCK_MICROVM_ACCEL overrides the
	// default.
	Accel string
	// Transport picks the host channel.
	Transport string
	// BootTimeout bounds how long a machine may take from QEMU's start to
	// a ready sandbox inside; default 5 minutes (TCG on a loaded host).
	BootTimeout time.Duration
	// WedgeGrace is how long past a process's timeout the host waits for
	// the guest to report that the process ended before it takes the
	// guest for wedged and kills the machine; default one minute.
	WedgeGrace time.Duration
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}
