// Package demo owns the scripted simulator demo behind `ibpath sim`: it
// builds a small rail-optimized fabric on verbs/sim, connects two RC queue
// pairs (one with an alternate path armed for APM, one without), drives
// application traffic in virtual time, pulls a cable and kills an HCA, and
// prints a readable timeline of what an application sees through verbs:
// async events, retries, path migration and error completions.
//
// The demo is deterministic: the same seed gives byte-identical output.
package demo
