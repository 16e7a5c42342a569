// Package hostdir keeps the host side of a container sandbox's writable and
// input folders, for the backends whose sandboxes run under another
// program (Docker, runsc) and so cannot build their mounts themselves.
//
// Each sandbox gets a folder under a base such as /run/airlock/docker,
// named after the airlock process that owns it and the sandbox id
// (OWNER-ID, where OWNER is "PID-STARTTIME"). In it:
//
//	scratch/   a tmpfs capped in bytes and inodes by the disk limit, whose
//	  tmp/     folders are bound into the sandbox at /tmp,
//	  output/  /workspace/output
//	  shm/     and /dev/shm, so that all writable space shares one cap
//	input/     a tmpfs bound read-only at /workspace/input
//
// Both tmpfs are mounted nosuid, nodev and noexec. The host writes input
// files through input/ and hands the artifact filter an open descriptor
// of scratch/output. Remove unmounts both and deletes the folder; Stale
// finds the folders of airlock processes that died without removing them.
package hostdir
