// Package cli owns the ibpath command-line tool: its commands (status,
// arm, migrate, peers, store, metrics, man, completion and the sim demo),
// their flags and arguments, the human tables and --json documents they
// print, and the exit codes they end with. It talks to ibpathd only through
// api.Client and renders status.Node, the one status type; cmd/ibpath is a
// thin main around Run.
package cli
