// Package architecture holds no code, only tests that keep the house rules
// of docs/development.md true: the package map (who may import whom), the
// binaries linking only their side of the flow, one owner per table, and
// control owning its transactions (no Pool() escape hatch, no SQL built
// by the admin page).
// They read `go list -json ./...` and the Go sources; a back-edge or a
// second writer of a table fails them.
package architecture
