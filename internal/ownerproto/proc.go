package ownerproto

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// StartTime returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat): with the pid it names one incarnation
// of a process, since pids are reused but never at the same start time.
// It is what Hello.Incarnation must carry.
func StartTime(pid int) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// procStat returns the state letter (field 3) and start time of pid.
func procStat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	// comm (field 2) may hold spaces and parentheses: fields after it
	// start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(f))
	}
	v, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat starttime: %w", pid, err)
	}
	return f[0][0], v, nil
}

// Alive reports whether the incarnation of pid still runs (a zombie does
// not). An incarnation of 0 matches any process with that pid.
func Alive(pid int, incarnation uint64) (bool, error) {
	state, st, err := procStat(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return state != 'Z' && state != 'X' && (incarnation == 0 || st == incarnation), nil
}
