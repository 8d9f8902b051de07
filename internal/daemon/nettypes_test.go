package daemon

import "net"

type (
	netConn   = net.Conn
	netDialer = net.Dialer
)
