package daemon

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Setting is one line of a configuration file.
type Setting struct {
	Line  int
	Key   string
	Value string
}

// ParseConfigFile reads ibpathd's configuration file: one "key = value"
// per line, where key is the long name of a command-line flag; '#' starts
// a comment; blank lines are ignored; a list flag may be repeated or take
// comma-separated values. A line that is not a setting is an error naming
// it. Checking that the keys exist is the caller's job (it knows the
// flags).
func ParseConfigFile(r io.Reader) ([]Setting, error) {
	var out []Setting
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not \"key = value\"", n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" {
			return nil, fmt.Errorf("line %d: a key is missing before '='", n)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		out = append(out, Setting{Line: n, Key: k, Value: v})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return out, nil
}
