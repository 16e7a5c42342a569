// Package netns opens listening sockets inside another process's network
// namespace, so that a service of the host (the egress proxy) can be
// reached from a sandbox whose only interface is lo.
package netns
