// Package dirfs carries out the file operations of sandbox.Files beneath a
// few open folders: put, open, stat, list, mkdir, remove and rename, each
// resolved with openat2 beneath its folder, following no link and crossing
// no mount. The native backend's init runs it inside the sandbox; the
// container backends run it on their host folders. It imports nothing of
// airlock's, so that init's start stays short (see package nsinit).
package dirfs
