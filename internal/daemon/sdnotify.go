package daemon

import (
	"fmt"
	"net"
	"os"
)

// Notify sends a state string ("READY=1", "STOPPING=1", "STATUS=...") to
// systemd's notification socket, named by $NOTIFY_SOCKET (sd_notify(3)).
// Without $NOTIFY_SOCKET (not started by systemd with Type=notify) it does
// nothing and returns nil.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: dial %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: write: %w", err)
	}
	return nil
}
