package asyncev

import "time"

// Defaults for Options.
const (
	DefaultMinPoll = time.Millisecond
	DefaultMaxWait = 100 * time.Millisecond
)

// Options tune a Pump. Zero fields take the defaults.
type Options struct {
	// MinPoll is the first polling interval for a context that does not
	// implement verbs.AsyncNotifier; it doubles while no event comes, up to
	// MaxWait, and starts again at MinPoll after each event. Default 1ms.
	MinPoll time.Duration
	// MaxWait bounds any wait for an event. With an AsyncNotifier the pump
	// still reads at least this often, in case a signal was coalesced or
	// missed; without one it is the longest polling interval. It is also
	// how late the pump may notice that the context failed. Default 100ms.
	MaxWait time.Duration
	// Subscribers are attached before the pump goroutine starts, so all of
	// them see every event from the first one. Create them with
	// NewSubscription.
	Subscribers []*Subscription
}

func (o Options) withDefaults() Options {
	if o.MinPoll <= 0 {
		o.MinPoll = DefaultMinPoll
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.MinPoll > o.MaxWait {
		o.MinPoll = o.MaxWait
	}
	return o
}
