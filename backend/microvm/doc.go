// Package microvm is the backend that gives each sandbox a kernel of its
// own: a QEMU "microvm" machine (KVM where /dev/kvm runs guests, QEMU's
// TCG translator otherwise) booting Debian's cloud kernel with an
// initramfs that holds this very binary as the guest's first process
// (package guest), and the image as a read-only erofs disk shared by every
// machine of that image. The guest has no network device; one connection
// (a virtio-serial port, or vsock where the host has vhost-vsock) carries
// every request, stream and egress connection (package wire). Inside, the
// agent runs the code in a native sandbox of the guest's kernel, with the
// same layers as the native backend.
//
// QEMU runs in a cgroup of its own capped at the machine's memory and
// CPUs, under QEMU's seccomp sandbox, and dies with the process that
// started it. Destroy kills it; nothing of a machine stays on the host
// but the shared, cached boot files.
package microvm
