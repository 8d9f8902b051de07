package pathsel

import (
	"fmt"
	"strings"
)

// parseSettings reads a rule's setting as ParseDamping and ParseHealth
// take it: "on" or "" (on), "off", or a comma-separated list of
// name=value, each name one of names, at most once; set parses one
// value. what names the rule in errors ("damping").
func parseSettings(what, s string, names []string, set func(name, value string) error) (on, off bool, err error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "on":
		return true, false, nil
	case "off":
		return false, true, nil
	}
	list := strings.Join(names, ", ")
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || v == "" {
			return false, false, fmt.Errorf("pathsel: %s %q: %q is not name=value (%s), on or off", what, s, f, list)
		}
		if seen[k] {
			return false, false, fmt.Errorf("pathsel: %s %q: %s given twice", what, s, k)
		}
		seen[k] = true
		known := false
		for _, n := range names {
			known = known || n == k
		}
		if !known {
			return false, false, fmt.Errorf("pathsel: %s %q: unknown setting %q (%s)", what, s, k, list)
		}
		if err := set(k, v); err != nil {
			return false, false, fmt.Errorf("pathsel: %s %q: %s: %w", what, s, k, err)
		}
	}
	return false, false, nil
}
