package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// table writes aligned columns: a header row, then one row per call of
// row. Empty cells print as "-" so that every column stays readable.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// printJSON writes v as indented JSON followed by a newline.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// hex formats a QPN, rkey or address as ibv_devinfo and the kernel do:
// 0x1c3.
func hex[T ~uint32 | ~uint64](v T) string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// num formats a count or number.
func num[T ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64](v T) string { return fmt.Sprint(v) }

// lid formats a LID; 0 (no LID: RoCE, or not assigned yet) prints as "-".
func lid(v uint16) string {
	if v == 0 {
		return ""
	}
	return num(v)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// addr names an endpoint by LID when it has one, else by GID.
func addr(l uint16, gid string) string {
	if l != 0 {
		return "lid " + num(l)
	}
	return gid
}

// plural: "1 QP", "2 QPs".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
