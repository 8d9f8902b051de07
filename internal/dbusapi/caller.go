package dbusapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/api"
)

// UnknownGID is the Caller.GID of a sender whose group could not be read:
// (gid_t)-1, which names no group, so it grants nothing.
const UnknownGID = ^uint32(0)

// callerOf asks the bus who sender is. The bus, not the sender, vouches
// for the UID and PID (it read them from the socket when the sender
// connected). The GID is the effective GID of that process, read from
// /proc; it is UnknownGID when the process is gone, is not visible, or no
// longer has the UID the bus reported.
func callerOf(ctx context.Context, conn *dbus.Conn, sender dbus.Sender) (api.Caller, error) {
	bus := conn.BusObject()
	var uid, pid uint32
	if err := bus.CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixUser", 0, string(sender)).Store(&uid); err != nil {
		return api.Caller{}, fmt.Errorf("GetConnectionUnixUser %s: %w", sender, err)
	}
	if err := bus.CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, string(sender)).Store(&pid); err != nil {
		return api.Caller{}, fmt.Errorf("GetConnectionUnixProcessID %s: %w", sender, err)
	}
	c := api.Caller{UID: uid, PID: int(pid), GID: UnknownGID}
	if gid, ok := procGID(int(pid), uid); ok {
		c.GID = gid
	}
	return c, nil
}

// procGID reads the effective GID of pid from /proc/PID/status, provided
// its effective UID is uid.
func procGID(pid int, uid uint32) (uint32, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	return parseProcStatus(b, uid)
}

// parseProcStatus finds the effective UID and GID (the second field of
// the Uid: and Gid: lines) in the text of /proc/PID/status.
func parseProcStatus(b []byte, uid uint32) (uint32, bool) {
	var euid, egid uint64
	var haveUID, haveGID bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "Uid" && key != "Gid") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, false
		}
		v, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return 0, false
		}
		if key == "Uid" {
			euid, haveUID = v, true
		} else {
			egid, haveGID = v, true
		}
	}
	if !haveUID || !haveGID || uint32(euid) != uid {
		return 0, false
	}
	return uint32(egid), true
}
