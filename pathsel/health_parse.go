package pathsel

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseHealth reads a health rule, as ibpathd's --health gives it: "on"
// or "" (DefaultHealth), "off", or a comma-separated list of
// window=DURATION, link-errors=N, min-retrans=N, retrans-ratio=X and
// clear=DURATION, each at most once, the others at their defaults
// ("window=5s,retrans-ratio=0.02"). The result is checked as
// WithDefaults checks it.
func ParseHealth(s string) (HealthConfig, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "on":
		return DefaultHealth, nil
	case "off":
		c := DefaultHealth
		c.Off = true
		return c, nil
	}
	var c HealthConfig
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || v == "" {
			return c, fmt.Errorf("pathsel: health %q: %q is not name=value (window, link-errors, min-retrans, retrans-ratio, clear), on or off", s, f)
		}
		if seen[k] {
			return c, fmt.Errorf("pathsel: health %q: %s given twice", s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "window":
			c.Window, err = positiveDuration(v)
		case "clear":
			c.Clear, err = positiveDuration(v)
		case "link-errors":
			c.LinkErrors, err = positiveCount(v)
		case "min-retrans":
			c.MinRetrans, err = positiveCount(v)
		case "retrans-ratio":
			c.RetransRatio, err = strconv.ParseFloat(v, 64)
			if err != nil || !(c.RetransRatio > 0 && c.RetransRatio <= 1) {
				err = fmt.Errorf("%q is not a ratio in (0, 1]", v)
			}
		default:
			return c, fmt.Errorf("pathsel: health %q: unknown setting %q (window, link-errors, min-retrans, retrans-ratio, clear)", s, k)
		}
		if err != nil {
			return c, fmt.Errorf("pathsel: health %q: %s: %w", s, k, err)
		}
	}
	return c.WithDefaults()
}

func positiveCount(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 || n > math.MaxUint32 {
		return 0, fmt.Errorf("%q is not a positive count", v)
	}
	return n, nil
}

// String gives c as ParseHealth reads it.
func (c HealthConfig) String() string {
	if c.Off {
		return "off"
	}
	return fmt.Sprintf("window=%v,link-errors=%d,min-retrans=%d,retrans-ratio=%g,clear=%v", c.Window, c.LinkErrors, c.MinRetrans, c.RetransRatio, c.Clear)
}
