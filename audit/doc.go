// Package audit keeps airlock's audit log: one record for every session
// created and ended, every process run, every code call, every egress
// decision and every artifact verdict, with the tenant, the time, what
// ran, how it ended, the limits it hit and the bytes it moved.
//
// A Store holds the records. SQLite, the default, is an embedded database
// file (the pure-Go modernc.org/sqlite driver); PostgreSQL (OpenPostgres,
// with pgx) is a database that several servers share. The interface speaks
// only of records, tenants, cursors and times, and package audittest is
// the suite every Store passes. A Recorder turns the events of a session
// Manager into records, and Retain prunes what is older than the retention.
package audit
