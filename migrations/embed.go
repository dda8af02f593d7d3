// Package migrations holds the PostgreSQL schema of Dwara as golang-migrate
// SQL files (NNNNNN_name.up.sql / .down.sql), embedded into the binary so
// `dwara migrate` and `dwara serve` apply them without files on disk.
//
// The schema is applied with db.Migrate; tests get a migrated database from
// db/dbtest.
package migrations

import "embed"

// FS holds every migration file of this directory. It is read-only and safe
// for concurrent use.
//
//go:embed *.sql
var FS embed.FS
