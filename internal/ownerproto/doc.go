// Package ownerproto owns the owner protocol: the long-lived connection a
// process that owns QPs (the libibpath shim) opens to ibpathd, over which
// it reports its QPs, events and backup attributes, and ibpathd relays the
// operator's arm and migrate commands to it. Only a QP's owner can modify
// the QP, so ibpathd never acts on a QP itself; it asks the owner.
//
// Transport: HTTP/1.1 on the daemon's UNIX socket,
//
//	GET /v1/owner HTTP/1.1
//	Connection: Upgrade
//	Upgrade: ibpath-owner/1
//
// answered by "101 Switching Protocols", after which both sides send JSON
// messages (Msg), one per line, at most MaxLine bytes each. The first
// message is the owner's hello, answered by welcome or error. Requests
// carry an ID that their reply (ack or result) repeats. docs/DAEMON.md has
// the full message table.
//
// Session is the owner side, in Go: the shim uses it, and tests use it to
// stand in for the shim.
package ownerproto
