// Package crossnic owns layer 2 of ibpath: cross-NIC failover in the style
// of SHIFT. This part holds the pieces every failover needs: the Directory
// through which each side publishes and looks up backup attributes (backup
// QP numbers and addresses, backup rkeys), the shadow rings that record
// every posted send and receive WR without allocating so the outstanding
// ones can be rewound, the rewind plan that uses the peer's receive counter
// to skip what the peer already consumed and refuses to replay while an
// atomic is outstanding, and the key translation of replayed WRs; and
// SRQGroup, which moves the receives of a shared receive queue to the
// backup device when its QPs fail over, together; and the mailbox, a
// control channel on the backup QP that consumes no receive. The per-QP
// decisions are the pure machine fsm.CrossNIC.
package crossnic
