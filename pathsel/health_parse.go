package pathsel

import (
	"fmt"
	"math"
	"strconv"
)

// ParseHealth reads a health rule, as ibpathd's --health gives it: "on"
// or "" (DefaultHealth), "off", or a comma-separated list of
// window=DURATION, link-errors=N, min-seq-errors=N, seq-error-ratio=X and
// clear=DURATION, each at most once, the others at their defaults
// ("window=5s,seq-error-ratio=0.02"). The result is checked as
// WithDefaults checks it.
func ParseHealth(s string) (HealthConfig, error) {
	var c HealthConfig
	on, off, err := parseSettings("health", s, []string{"window", "link-errors", "min-seq-errors", "seq-error-ratio", "clear"}, func(k, v string) (err error) {
		switch k {
		case "window":
			c.Window, err = positiveDuration(v)
		case "clear":
			c.Clear, err = positiveDuration(v)
		case "link-errors":
			c.LinkErrors, err = positiveCount(v)
		case "min-seq-errors":
			c.MinSeqErrors, err = positiveCount(v)
		case "seq-error-ratio":
			c.SeqErrorRatio, err = strconv.ParseFloat(v, 64)
			if err != nil || !(c.SeqErrorRatio > 0 && c.SeqErrorRatio <= 1) {
				err = fmt.Errorf("%q is not a ratio in (0, 1]", v)
			}
		}
		return err
	})
	switch {
	case err != nil:
		return c, err
	case on:
		return DefaultHealth, nil
	case off:
		c = DefaultHealth
		c.Off = true
		return c, nil
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
	return fmt.Sprintf("window=%v,link-errors=%d,min-seq-errors=%d,seq-error-ratio=%g,clear=%v", c.Window, c.LinkErrors, c.MinSeqErrors, c.SeqErrorRatio, c.Clear)
}
