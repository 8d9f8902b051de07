package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Owner protocol 1 (a libibpath older than schema 2, still running in a
// process after ibpathd was upgraded) wrote paths, the backup, the remote
// end and a command's states as strings. Path, Backup, Remote and QPState
// read those strings as well as their objects, so that ibpathd keeps such
// a process's session; they always write objects. A string that no
// protocol-1 shim wrote is an error, as an unknown field is.

// decodeObject decodes an object into v strictly (unknown fields are
// errors, as for the message around it).
func decodeObject(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// legacyString reports whether data is a JSON string, and its value.
func legacyString(data []byte) (string, bool, error) {
	if len(data) == 0 || data[0] != '"' {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return "", true, err
	}
	return s, true, nil
}

// UnmarshalJSON reads a path object, or protocol 1's "port 1", "port
// 1+2", "-", "" (none) and "mlx5_1 (backup)" (the traffic on the backup:
// no path of the QP's own device).
func (p *Path) UnmarshalJSON(data []byte) error {
	s, isStr, err := legacyString(data)
	switch {
	case err != nil:
		return err
	case !isStr:
		type plain Path
		return decodeObject(data, (*plain)(p))
	}
	*p = Path{}
	switch {
	case s == "" || s == "-":
		return nil
	case strings.HasPrefix(s, "port "):
		port, bits, _ := strings.Cut(strings.TrimPrefix(s, "port "), "+")
		n, err := strconv.ParseUint(port, 10, 8)
		if err != nil || n == 0 {
			return fmt.Errorf("status: path %q: bad port", s)
		}
		p.Port = uint8(n)
		if bits != "" {
			b, err := strconv.ParseUint(bits, 10, 8)
			if err != nil {
				return fmt.Errorf("status: path %q: bad path bits", s)
			}
			p.PathBits = uint8(b)
		}
		return nil
	case strings.Contains(s, " (backup"):
		return nil
	}
	return fmt.Errorf("status: path %q: not a path", s)
}

// UnmarshalJSON reads a backup object, or protocol 1's "mlx5_1 qpn 0x1c3"
// with " (connecting)" until it is connected.
func (b *Backup) UnmarshalJSON(data []byte) error {
	s, isStr, err := legacyString(data)
	switch {
	case err != nil:
		return err
	case !isStr:
		type plain Backup
		return decodeObject(data, (*plain)(b))
	}
	*b = Backup{}
	if s == "" {
		return nil
	}
	rest, connecting := strings.CutSuffix(s, " (connecting)")
	dev, qpn, ok := strings.Cut(rest, " qpn ")
	n, err := strconv.ParseUint(qpn, 0, 32)
	if !ok || dev == "" || err != nil {
		return fmt.Errorf("status: backup %q: want DEVICE qpn QPN", s)
	}
	b.Device, b.QPN, b.Connected = dev, uint32(n), !connecting
	return nil
}

// UnmarshalJSON reads a remote object, or protocol 1's "lid 33 qpn 0x1e2"
// and "GID qpn 0x1e2".
func (r *Remote) UnmarshalJSON(data []byte) error {
	s, isStr, err := legacyString(data)
	switch {
	case err != nil:
		return err
	case !isStr:
		type plain Remote
		return decodeObject(data, (*plain)(r))
	}
	*r = Remote{}
	if s == "" {
		return nil
	}
	addr, qpn, ok := strings.Cut(s, " qpn ")
	n, err := strconv.ParseUint(qpn, 0, 32)
	if !ok || addr == "" || err != nil {
		return fmt.Errorf("status: remote %q: want lid LID qpn QPN, or GID qpn QPN", s)
	}
	r.QPN = uint32(n)
	if lid, isLID := strings.CutPrefix(addr, "lid "); isLID {
		v, err := strconv.ParseUint(lid, 10, 16)
		if err != nil {
			return fmt.Errorf("status: remote %q: bad LID", s)
		}
		r.LID = uint16(v)
		return nil
	}
	r.GID = addr
	return nil
}

// UnmarshalJSON reads a state object, or protocol 1's "armed port 1"
// (state and primary path), "would move to port 2" (a dry run's) and a
// state alone.
func (q *QPState) UnmarshalJSON(data []byte) error {
	s, isStr, err := legacyString(data)
	switch {
	case err != nil:
		return err
	case !isStr:
		type plain QPState
		return decodeObject(data, (*plain)(q))
	}
	*q = QPState{}
	if rest, ok := strings.CutPrefix(s, "would move to "); ok {
		return q.Primary.UnmarshalJSON(strconv.AppendQuote(nil, rest))
	}
	state, path, _ := strings.Cut(s, " ")
	q.APM = state
	if path == "" {
		return nil
	}
	return q.Primary.UnmarshalJSON(strconv.AppendQuote(nil, path))
}
