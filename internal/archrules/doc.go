// Package archrules owns the check that the tree is what
// docs/ARCHITECTURE.md says it is: every package of the module has a row
// in its package table, imports only what that row names, and the import
// rules below the table hold (verbs on the standard library alone, fsm
// pure, no goroutines in the simulator and the layers' mechanisms). The
// check is its test; the document is the one source of the rules.
package archrules
