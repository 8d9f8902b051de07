// Package asyncev owns the goroutines that watch RDMA devices for the
// layers above: one event pump per open device context, which reads async
// events (ibv_get_async_event) and hands them, typed and tagged with the
// device name, to every subscriber in order before acknowledging them; and
// the ARMED poller, which repeatedly runs a caller-supplied check after a
// REARM, because Linux verbs raises no event when an alternate path becomes
// ARMED.
//
// Besides the runtime in internal/, this is the only package that starts
// goroutines. It decides nothing: what an event means and what to query
// belongs to apm, crossnic and pathsel. It does not log.
package asyncev
