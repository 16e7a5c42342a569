// Package hostroot describes the "host" image of the backends that build a
// root from the host's own folders (gvisor): the host's system folders
// bound read-only, symlinks recreated as the host has them, and a made-up
// /etc holding the sandbox user, localhost and name-service order, plus a
// short allowlist of host /etc entries (the loader cache, certificates,
// fonts, time zone...). Never the rest of /etc, nor /root, /home or /var.
package hostroot
