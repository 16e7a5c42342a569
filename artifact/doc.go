// Package artifact is the artifacts layer of airlock: it decides what may
// leave a sandbox's /workspace/output folder and in which form.
//
// The files that untrusted code wrote are themselves untrusted. Collect walks
// the output folder through an open directory descriptor without following
// any link, gives every entry a verdict (accepted, sanitized or rejected, see
// the sandbox package) and writes only accepted and sanitized files beneath a
// host folder, never outside it. Check runs one file's content through the
// same rules, so that a server can hand out a single file safely.
//
// The rules, in the order they apply:
//
//   - Names: every path component must be valid UTF-8 without control or
//     bidirectional formatting characters, backslashes, "." or "..", and the
//     path must respect the depth and length caps. Hidden names (starting
//     with a dot) are refused unless the policy's AllowHidden is set.
//   - Kinds of entries: only regular files with a single link are read;
//     symbolic links, hard links, FIFOs, sockets, devices and mount points
//     are rejected after an O_PATH open, without being opened for reading.
//   - Caps: the number of entries (folders count), the bytes of one file and
//     of all files. A file over a cap is rejected from its stat size; one
//     that grows past a cap while it is read is rejected too.
//   - Types: the extension must be on the allowlist, and the content is
//     sniffed; the content wins, and risky disagreements are rejected.
//   - Content: CSV and TSV cells that a spreadsheet would run as formulas are
//     neutralised; scripts and remote references are removed from HTML, SVG,
//     XML and Markdown; zip archives and Office Open XML files are scanned
//     for macros, ActiveX, external links, DDE, escaping names and bombs;
//     a package.json with install scripts (preinstall, postinstall,
//     prepare…) is refused, since npm would run them on the host.
//   - Destination: a file never replaces an entry of the host folder unless
//     the caller asks for it (Destination.Overwrite), and never follows a
//     link there.
//
// The SHA-256 and size of an accepted or sanitized artifact are those of the
// bytes written to the host, after sanitizing. A rejected artifact reports
// the size that the sandbox's stat gave and no hash.
package artifact
