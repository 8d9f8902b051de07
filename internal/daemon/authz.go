package daemon

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/ibpath/ibpath/internal/api"
)

// Policy says who may act. Everyone may read status; root and the
// operators may arm and migrate any QP, a port or all QPs; any other user
// may arm and migrate only the QPs of its own processes, one at a time.
type Policy struct {
	// OperatorUIDs and OperatorGIDs: users, and members of groups, with
	// root's rights over QPs.
	OperatorUIDs map[uint32]bool
	OperatorGIDs map[uint32]bool
	// groups returns the group ids of a uid (primary and supplementary);
	// os/user by default, replaced in tests.
	groups func(uid uint32) ([]uint32, error)
}

// ParseOperators builds a policy from names: "alice" or "1001" (a user),
// "@ibpath" or "@1002" (a group). Unknown names are errors, never ignored.
func ParseOperators(names []string) (Policy, error) {
	p := Policy{OperatorUIDs: map[uint32]bool{}, OperatorGIDs: map[uint32]bool{}}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if g, ok := strings.CutPrefix(n, "@"); ok {
			id, err := lookupID(g, func(s string) (string, error) {
				gr, err := user.LookupGroup(s)
				if err != nil {
					return "", err
				}
				return gr.Gid, nil
			})
			if err != nil {
				return Policy{}, fmt.Errorf("operator group %q: %w", g, err)
			}
			p.OperatorGIDs[id] = true
			continue
		}
		id, err := lookupID(n, func(s string) (string, error) {
			u, err := user.Lookup(s)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		})
		if err != nil {
			return Policy{}, fmt.Errorf("operator user %q: %w", n, err)
		}
		p.OperatorUIDs[id] = true
	}
	return p, nil
}

func lookupID(s string, byName func(string) (string, error)) (uint32, error) {
	if v, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(v), nil
	}
	id, err := byName(s)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("id %q: %w", id, err)
	}
	return uint32(v), nil
}

// Operator reports whether c may act on any QP.
func (p Policy) Operator(c api.Caller) bool {
	if c.UID == 0 || p.OperatorUIDs[c.UID] || p.OperatorGIDs[c.GID] {
		return true
	}
	if len(p.OperatorGIDs) == 0 {
		return false
	}
	groups := p.groups
	if groups == nil {
		groups = userGroups
	}
	gs, err := groups(c.UID)
	if err != nil {
		return false
	}
	for _, g := range gs {
		if p.OperatorGIDs[g] {
			return true
		}
	}
	return false
}

func userGroups(uid uint32) ([]uint32, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil, err
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, s := range ids {
		if v, err := strconv.ParseUint(s, 10, 32); err == nil {
			out = append(out, uint32(v))
		}
	}
	return out, nil
}

// forbidden is the error of a refused action.
func forbidden(format string, a ...any) *api.Error {
	return &api.Error{Code: api.CodeForbidden, Message: fmt.Sprintf(format, a...)}
}

// checkAction decides whether c may act on target; qpOwner is the uid of
// the QP's owner for a single-QP target.
func (p Policy) checkAction(c api.Caller, action string, t api.Target, qpOwnerUID uint32) error {
	if p.Operator(c) {
		return nil
	}
	if t.All || t.QPN == 0 {
		return forbidden("%s %s: only root and operators may act on a port or on all QPs (uid %d is neither)", action, t, c.UID)
	}
	if qpOwnerUID != c.UID {
		return forbidden("%s %s: the QP belongs to uid %d; uid %d may act only on its own processes' QPs", action, t, qpOwnerUID, c.UID)
	}
	return nil
}
