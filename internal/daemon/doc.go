// Package daemon owns ibpathd's runtime: it picks the fabric (real HCAs
// found in sysfs, or the embedded simulated fabric), keeps the node's
// status (the one status type of internal/status) up to date from port
// events, layer-1 events and the processes attached over the owner
// protocol, checks who may do what, relays arm and migrate to the owning
// process, stores and replicates backup attributes, and serves the local
// API (HTTP over a UNIX socket), metrics and sd_notify readiness. Front
// ends (HTTP, D-Bus) reach it only through api.Backend.
package daemon
