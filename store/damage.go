package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io/fs"
	"os"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// How Open finds a damaged file (ErrDamaged) without crashing on it.
//
// bbolt reads its file through a memory map and trusts what it finds
// there: a page past the end of a truncated file raises SIGBUS, and a
// page that does not parse makes it panic or read wild memory. Open
// therefore works in steps, all in its own goroutine, with
// debug.SetPanicOnFault on (a fault on the map becomes a panic) and a
// recover that turns a panic raised by bbolt, or a fault, into ErrDamaged:
//
//  1. precheck: an existing non-empty file is opened read-only, which
//     reads only the meta pages (bbolt's errors for them are damage), and
//     checked for truncation (the meta's page count against the file's
//     size) and, through plain file reads, for the page headers and the
//     freelist that bbolt uses without checking them.
//  2. The file is opened read-write (bbolt reads the freelist, checked in
//     step 1), and walk reads every key and value of every bucket and
//     finds every key again by lookup, so that a page that does not parse
//     is met here. Only then tx.Check runs (in a goroutine of bbolt's own,
//     where a panic could not be recovered: the page headers and keys it
//     reads were read before, in step 1 or by the walk) and its findings
//     are damage too.
//  3. migrate and load decode every value; a schema-3 value must pass its
//     checksum (codec.go).
//
// No step writes to the file before all of them found it sound, except
// migrate, whose transaction is rolled back when a value does not decode.

// bbolt's on-disk layout (go.etcd.io/bbolt v1.4.0, file format version 2),
// read by checkPages; integers are in the machine's byte order.
//
//	page header: id u64, flags u16, count u16, overflow u32   (16 bytes)
//	meta (after the page header): magic u32, version u32, pageSize u32,
//	  flags u32, root u64, sequence u64, freelist u64, pgid u64, txid u64,
//	  checksum u64 (FNV-64a of the meta's bytes before it)
//	freelist (after the page header): count page ids u64, or, when count
//	  is 0xFFFF, the number of ids u64 and then the ids
const (
	boltPageHeader   = 16
	boltMetaEnd      = boltPageHeader + 64
	boltMetaFlag     = 0x04
	boltFreelistFlag = 0x10
	boltMagic        = 0xED0CDAED
	boltNoFreelist   = ^uint64(0)
)

// precheck checks an existing, non-empty file before the read-write open
// reads any page but the meta pages: bbolt's read-only open reads only
// those, and only the read-write one loads the freelist page.
func precheck(path string, timeout time.Duration) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		// Absent, not a regular file, or empty: the read-write open
		// creates it, refuses it, or initialises it.
		return nil
	}
	var f *os.File
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, Timeout: timeout, OpenFile: keep(&f)})
	if err != nil {
		return openError(err, true)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if err := checkSize(tx, f); err != nil {
			return err
		}
		return checkPages(db, f, tx)
	})
}

// keep is a bolt.Options.OpenFile that keeps the file bbolt opens in *f.
func keep(f **os.File) func(string, int, os.FileMode) (*os.File, error) {
	return func(name string, flag int, perm os.FileMode) (*os.File, error) {
		file, err := os.OpenFile(name, flag, perm)
		*f = file
		return file, err
	}
}

// openError classifies an error of bolt.Open: meta pages that are not
// valid are damage; so are, from a read-only open (ro), bbolt's own
// complaints about the file's size ("file size too small"). A lock timeout
// and the system's errors (permission, mmap) are not.
func openError(err error, ro bool) error {
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	case errors.Is(err, bolt.ErrInvalid):
		return fmt.Errorf("%w: no valid meta page, not a bbolt file: %w", ErrDamaged, err)
	case errors.Is(err, bolt.ErrChecksum):
		return fmt.Errorf("%w: meta pages fail their checksum: %w", ErrDamaged, err)
	case errors.Is(err, bolt.ErrVersionMismatch):
		return fmt.Errorf("%w: meta page of an unknown bbolt format version: %w", ErrDamaged, err)
	}
	var pathErr *fs.PathError
	var errno syscall.Errno
	if !ro || errors.As(err, &pathErr) || errors.As(err, &errno) {
		return err
	}
	return fmt.Errorf("%w: %w (truncated, or not a bbolt file)", ErrDamaged, err)
}

// checkSize reports a file shorter than the pages its meta page counts.
// bbolt maps the file without comparing them, and reading a page past the
// end of the file through the map raises SIGBUS.
func checkSize(tx *bolt.Tx, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < tx.Size() {
		return fmt.Errorf("%w: truncated: %d of %d bytes", ErrDamaged, fi.Size(), tx.Size())
	}
	return nil
}

// checkPages reads with plain file reads (a short read is an error, not a
// fault) what bbolt uses without checking: the page headers of both meta
// pages (their checksum covers the meta, not the header) and the freelist
// page of the meta in use, whose ids must name distinct pages between the
// meta pages and the end of the file. bbolt's read-write open loads that
// freelist, and tx.Check reads those headers in a goroutine where a panic
// would end the process.
func checkPages(db *bolt.DB, f *os.File, tx *bolt.Tx) error {
	ps := uint64(db.Info().PageSize)
	pages := uint64(tx.Size()) / ps
	read := func(id, n uint64) ([]byte, error) {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, int64(id*ps)); err != nil {
			return nil, fmt.Errorf("%w: page %d: %w", ErrDamaged, id, err)
		}
		return b, nil
	}
	ne := binary.NativeEndian
	freelist, found := uint64(0), false
	for id := uint64(0); id < 2; id++ {
		p, err := read(id, boltMetaEnd)
		if err != nil {
			return err
		}
		if got, flags := ne.Uint64(p), ne.Uint16(p[8:]); got != id || flags != boltMetaFlag {
			return fmt.Errorf("%w: meta page %d: its header says page %d, flags %#x", ErrDamaged, id, got, flags)
		}
		h := fnv.New64a()
		h.Write(p[boltPageHeader : boltMetaEnd-8])
		if ne.Uint32(p[boltPageHeader:]) == boltMagic && h.Sum64() == ne.Uint64(p[boltMetaEnd-8:]) &&
			ne.Uint64(p[boltPageHeader+48:]) == uint64(tx.ID()) {
			freelist, found = ne.Uint64(p[boltPageHeader+32:]), true
		}
	}
	switch {
	case !found:
		return fmt.Errorf("%w: no meta page holds transaction %d", ErrDamaged, tx.ID())
	case freelist == boltNoFreelist:
		return fmt.Errorf("%w: no freelist page (a file written with NoFreelistSync)", ErrDamaged)
	case freelist < 2 || freelist >= pages:
		return fmt.Errorf("%w: freelist page %d outside pages 2 to %d", ErrDamaged, freelist, pages-1)
	}
	h, err := read(freelist, boltPageHeader)
	if err != nil {
		return err
	}
	if id, flags := ne.Uint64(h), ne.Uint16(h[8:]); id != freelist || flags != boltFreelistFlag {
		return fmt.Errorf("%w: freelist page %d: its header says page %d, flags %#x", ErrDamaged, freelist, id, flags)
	}
	span := uint64(ne.Uint32(h[12:])) + 1
	if span > pages-freelist {
		return fmt.Errorf("%w: freelist page %d: %d pages long, past the end (%d pages)", ErrDamaged, freelist, span, pages)
	}
	p, err := read(freelist, span*ps)
	if err != nil {
		return err
	}
	n, at := uint64(ne.Uint16(h[10:])), uint64(boltPageHeader)
	if n == 0xFFFF {
		n, at = ne.Uint64(p[at:]), at+8
	}
	if n > (uint64(len(p))-at)/8 {
		return fmt.Errorf("%w: freelist page %d: %d ids do not fit its %d pages", ErrDamaged, freelist, n, span)
	}
	seen := make(map[uint64]bool, n)
	for i := uint64(0); i < n; i++ {
		id := ne.Uint64(p[at+8*i:])
		if id < 2 || id >= pages {
			return fmt.Errorf("%w: freelist page %d: lists page %d, outside pages 2 to %d", ErrDamaged, freelist, id, pages-1)
		}
		if seen[id] {
			return fmt.Errorf("%w: freelist page %d: lists page %d twice", ErrDamaged, freelist, id)
		}
		seen[id] = true
	}
	return nil
}

// check reads the whole file (f is bbolt's handle), in the calling
// goroutine, then runs bbolt's tx.Check; any finding is damage.
func check(f *os.File, tx *bolt.Tx) error {
	if err := checkSize(tx, f); err != nil {
		return err
	}
	if err := walk(tx, ""); err != nil {
		return err
	}
	var first error
	n := 0
	for err := range tx.Check() {
		if first == nil {
			first = err
		}
		n++
	}
	switch {
	case n == 1:
		return fmt.Errorf("%w: %v", ErrDamaged, first)
	case n > 1:
		return fmt.Errorf("%w: %v (and %d more problems)", ErrDamaged, first, n-1)
	}
	return nil
}

// container is a bucket, or a transaction's top level.
type container interface {
	Cursor() *bolt.Cursor
	Bucket(name []byte) *bolt.Bucket
}

// walk reads every key and value under b (path names it; "" is the top
// level) and of every bucket nested in it, checks that the keys come in
// order and finds each one again by lookup (which reads the branch pages'
// keys). Reading through bbolt here, under Open's recover, meets a page
// that does not parse before anything else does.
func walk(b container, path string) error {
	where := "top level"
	if path != "" {
		where = "bucket " + path
	}
	c, lookup := b.Cursor(), b.Cursor()
	var prev []byte
	var sum uint32
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("%w: %s: key %x after key %x, out of order", ErrDamaged, where, k, prev)
		}
		if found, _ := lookup.Seek(k); !bytes.Equal(found, k) {
			return fmt.Errorf("%w: %s: key %x is not found by a lookup", ErrDamaged, where, k)
		}
		prev = k
		if v != nil {
			if path == "" {
				return fmt.Errorf("%w: %s: key %x holds a value, not a bucket", ErrDamaged, where, k)
			}
			sum = crc32.Update(sum, castagnoli, v) // read every byte
			continue
		}
		sub := b.Bucket(k)
		if sub == nil {
			return fmt.Errorf("%w: %s: key %x holds neither a value nor a bucket", ErrDamaged, where, k)
		}
		name := fmt.Sprintf("%q", k)
		if path != "" {
			name = path + "/" + name
		}
		if err := walk(sub, name); err != nil {
			return err
		}
	}
	_ = sum
	return nil
}

// thisPackage is the prefix of this package's function names
// ("github.com/ibpath/ibpath/store.").
var thisPackage = strings.TrimSuffix(runtime.FuncForPC(reflect.ValueOf(checkSize).Pointer()).Name(), "checkSize")

// fromFile reports whether r, recovered during Open, comes from reading the
// file: a memory fault at an address (SetPanicOnFault is on, and this
// package reads no memory but bbolt's map that could fault), or a panic
// raised inside bbolt (an assertion on a page that does not parse, an
// index out of range). A panic raised by this package's own code is a bug,
// not damage, and is not taken for it.
func fromFile(r any) bool {
	if _, ok := r.(interface{ Addr() uintptr }); ok {
		return true
	}
	pc := make([]uintptr, 128)
	frames := runtime.CallersFrames(pc[:runtime.Callers(1, pc)])
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case !panicking:
			panicking = f.Function == "runtime.gopanic"
		case strings.HasPrefix(f.Function, "go.etcd.io/bbolt"):
			return true
		case strings.HasPrefix(f.Function, thisPackage):
			return false
		}
		if !more {
			return false
		}
	}
}
