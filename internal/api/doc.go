// Package api owns the local API of ibpathd: HTTP/1.1 over the daemon's
// UNIX socket, with versioned paths. It holds the paths, the request and
// response bodies, the error body, and Client, which the CLI (and any other
// local tool) uses. The server side lives in the daemon; it renders
// status.Node, the one status type, and nothing else.
//
// Paths (all under /v1):
//
//	GET  /v1/status           status.Node
//	GET  /v1/peers            []status.Peer
//	POST /v1/arm              ActionRequest  -> ActionResult
//	POST /v1/migrate          ActionRequest  -> ActionResult
//	GET  /v1/store/qps        []StoreQP      (?node=NAME filters by owner node)
//	GET  /v1/store/mrs        []StoreMR
//	GET  /v1/metrics          Prometheus text exposition
//	GET  /v1/owner            the owner protocol (HTTP Upgrade: ibpath-owner/1)
//
// Every error is an HTTP status of 400 or more with an Error body.
package api
