package pathsel

import (
	"fmt"
	"strconv"
	"time"
)

// ParseDamping reads a damping setting, as the shim's IBPATH_DAMPING and
// ibpathd's --damping give it: "on" or "" (DefaultDamping), "off", or a
// comma-separated list of half-life=DURATION, suppress=N, reuse=N,
// penalty=N and max-suppress=DURATION, each one given at most once, the
// others at their defaults ("half-life=10s,suppress=2000"). The result
// is checked as WithDefaults checks it.
func ParseDamping(s string) (DampingConfig, error) {
	var c DampingConfig
	on, off, err := parseSettings("damping", s, []string{"half-life", "suppress", "reuse", "penalty", "max-suppress"}, func(k, v string) (err error) {
		switch k {
		case "half-life":
			c.HalfLife, err = positiveDuration(v)
		case "max-suppress":
			c.MaxSuppress, err = positiveDuration(v)
		case "suppress":
			c.Suppress, err = positiveNumber(v)
		case "reuse":
			c.Reuse, err = positiveNumber(v)
		case "penalty":
			c.Penalty, err = positiveNumber(v)
		}
		return err
	})
	switch {
	case err != nil:
		return c, err
	case on:
		return DefaultDamping, nil
	case off:
		c = DefaultDamping
		c.Off = true
		return c, nil
	}
	return c.WithDefaults()
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (e.g. 30s)", v)
	}
	return d, nil
}

func positiveNumber(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1e12 {
		return 0, fmt.Errorf("%q is not a positive number", v)
	}
	return f, nil
}

// String gives c as ParseDamping reads it.
func (c DampingConfig) String() string {
	if c.Off {
		return "off"
	}
	return fmt.Sprintf("half-life=%v,suppress=%g,reuse=%g,penalty=%g,max-suppress=%v", c.HalfLife, c.Suppress, c.Reuse, c.Penalty, c.MaxSuppress)
}
