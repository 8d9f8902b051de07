// Package runtime owns the goroutines that drive ibpath's layers in a live
// process: it wires the async event pumps and the ARMED poller of asyncev
// to the layer-1 manager, serialises every call into the manager, forwards
// every event onward (the application must still see all of them), and
// logs what layer 1 does with log/slog.
package runtime
