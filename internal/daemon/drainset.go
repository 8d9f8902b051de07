package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// drainsFile holds the drained ports in the state directory, so that a
// drain survives a restart of ibpathd (and the node's).
const drainsFile = "drains.json"

// drainsVersion is the version of drains.json's format.
const drainsVersion = 1

// drained is one drained port as kept on disk.
type drained struct {
	Device string    `json:"device"`
	Port   uint8     `json:"port"`
	Since  time.Time `json:"since"`
	ByUID  uint32    `json:"by_uid"`
}

type drainsDoc struct {
	Version int       `json:"version"`
	Drains  []drained `json:"drains"`
}

// drainSet is the node's drained ports, written through to drains.json.
type drainSet struct {
	path string
	mu   sync.Mutex
	list []drained // sorted by device and port
}

// loadDrains reads path; a missing file is an empty set. A file that does
// not parse is an error naming it: ibpathd does not start with the
// operator's drains forgotten.
func loadDrains(path string) (*drainSet, error) {
	s := &drainSet{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("drains: read %s: %w", path, err)
	}
	var doc drainsDoc
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("drains: %s is not a drains file (%w): repair it, or remove it to forget every drain", path, err)
	}
	if doc.Version != drainsVersion {
		return nil, fmt.Errorf("drains: %s has version %d, this ibpathd reads %d", path, doc.Version, drainsVersion)
	}
	for _, d := range doc.Drains {
		if d.Device == "" || d.Port == 0 {
			return nil, fmt.Errorf("drains: %s: an entry without a device or port: %+v", path, d)
		}
		s.set(d)
	}
	return s, nil
}

// set adds or replaces d; the caller saves.
func (s *drainSet) set(d drained) {
	i, found := s.find(d.Device, d.Port)
	if found {
		s.list[i] = d
		return
	}
	s.list = slices.Insert(s.list, i, d)
}

func (s *drainSet) find(dev string, port uint8) (int, bool) {
	return slices.BinarySearchFunc(s.list, drained{Device: dev, Port: port}, func(a, b drained) int {
		if c := strings.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
}

// add drains a port and saves; it reports false when it was drained
// already (the first drain's time and user are kept).
func (s *drainSet) add(d drained) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, found := s.find(d.Device, d.Port); found {
		return false, nil
	}
	old := slices.Clone(s.list)
	s.set(d)
	if err := s.save(); err != nil {
		s.list = old
		return false, err
	}
	return true, nil
}

// remove undrains a port and saves; it reports false when the port was
// not drained.
func (s *drainSet) remove(dev string, port uint8) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, found := s.find(dev, port)
	if !found {
		return false, nil
	}
	old := slices.Clone(s.list)
	s.list = slices.Delete(s.list, i, i+1)
	if err := s.save(); err != nil {
		s.list = old
		return false, err
	}
	return true, nil
}

// all returns the drained ports.
func (s *drainSet) all() []drained {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// has reports whether port of dev is drained.
func (s *drainSet) has(dev string, port uint8) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, found := s.find(dev, port)
	return found
}

// save writes the set durably: a temporary file synced, renamed over the
// old one, the directory synced.
func (s *drainSet) save() error {
	b, err := json.MarshalIndent(drainsDoc{Version: drainsVersion, Drains: s.list}, "", "  ")
	if err != nil {
		return fmt.Errorf("drains: encode: %w", err)
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("drains: create %s: %w", tmp, err)
	}
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("drains: write %s: %w", tmp, werr)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("drains: rename %s: %w", tmp, err)
	}
	if dir, err := os.Open(filepath.Dir(s.path)); err == nil {
		dir.Sync()
		dir.Close()
	}
	return nil
}
