// Package replica owns peer-to-peer replication of the store of backup
// attributes: cluster membership (hashicorp/memberlist, SWIM), the
// resolution of a GID or LID to the node that holds it, and the exchange
// of entries and tombstones between nodes. There is no central server.
//
// API used by the daemon (kept stable):
//
//	r, err := replica.Start(st, replica.Config{Name, BindAddr, BindPort, Key, Seeds, Meta, ...})
//	r.PublishQP(owner, key, backup, remoteRoute)   // durable local write, then push
//	r.PublishMR(owner, key, backup, remoteRoutes)
//	r.LookupQP(ctx, key) / r.LookupMR(ctx, key)    // memory, else pull from the key's node
//	r.RemoveOwner(owner)                           // local removal with tombstones, pushed
//	r.DescribeHCA(ctx, route)                      // the adapter holding route, from its node (cached 1 s)
//	r.Resolve(route), r.Members(), r.Stats(), r.Addr(), r.SetMeta(meta)
//	r.Close()                                      // leave gracefully; the store stays open
//
// The store's own listing (store.QPEntries, MREntries, Tombstones)
// serves `ibpath store`.
//
// Membership: every node runs memberlist with its GIDs and LIDs as node
// metadata (at most 512 bytes, ErrMetaTooLarge beyond). Any route (GID,
// else LID) resolves to the live member whose metadata holds it.
//
// Replication: PublishQP/PublishMR push the new entry to the node at the
// other end of the QP as soon as it is written; a lookup that misses
// pulls from the node of the key's route; every AntiEntropyInterval a
// random live peer and this node exchange per-origin digests and then
// only the records that differ, which repairs whatever a restart or a
// partition made a node miss. Every node ends up with every entry.
// Remote records are applied last-writer-wins by their version (a hybrid
// logical clock value assigned by the writing node), then owner; removal
// writes tombstones, which keep older copies from coming back until
// TombstoneTTL.
//
// Security: gossip and data exchange both go through memberlist's
// encrypted, authenticated channels keyed by Config.Key (AES-GCM;
// GossipVerifyIncoming and GossipVerifyOutgoing on). Traffic that does
// not authenticate with the key is refused, logged through slog and
// counted in Stats.PeersRefused. Start refuses to run without a key
// unless Config.Insecure is set.
//
// Adapter descriptions: DescribeHCA asks the member whose metadata holds
// a route for the description of the adapter behind it (its ports'
// states, LIDs, LMC, GIDs), which that node answers from Config.Describe;
// a local route is answered locally. Answers are cached for DescribeTTL
// (default 1 s: port states change). Layer 1 uses them to choose an
// alternate path towards a peer.
//
// Reads never wait on the network unless the caller asks (LookupQP on a
// miss): the failover path reads the store's memory. Goroutines: four
// message workers and the anti-entropy loop, plus memberlist's own; all
// stop at Close. See docs/REPLICATION.md.
package replica
