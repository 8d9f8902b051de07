package crossnic

import (
	"errors"
	"fmt"
)

// Close releases everything the shadow made on the backup device, in the
// order the verbs allow: the backup QPs and their CQs, the memory
// registrations, the SRQs, then the PDs. The application closed its
// context (whose resources it should have released first); what is left
// of it is released here so that nothing made on its behalf outlives it
// (a completion channel or a PD would keep the backup context's objects,
// and on a provider that counts them its file descriptors, alive). The
// completion channel is the caller's (SetCompChannel). The shadow is
// empty afterwards; the first error of each kind is returned.
func (s *Shadow) Close() error {
	var errs []error
	for len(s.order) > 0 {
		if err := s.DestroyQP(s.order[0].def); err != nil {
			errs = append(errs, err)
		}
	}
	for lkey := range s.bakMRs {
		if err := s.DeregMR(lkey); err != nil {
			errs = append(errs, err)
		}
	}
	for def := range s.srqs {
		if err := s.DestroySRQ(def); err != nil {
			errs = append(errs, err)
		}
	}
	for def, b := range s.pds {
		delete(s.pds, def)
		if err := b.Dealloc(); err != nil {
			errs = append(errs, fmt.Errorf("crossnic: shadow ibv_dealloc_pd on %s: %w", s.bakDesc.Name, err))
		}
	}
	return errors.Join(errs...)
}
