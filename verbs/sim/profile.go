package sim

import "fmt"

// Profile names a set of device behaviours on which the sources (the IBA
// specification, the kernel drivers, rdma-core's providers) differ. A
// fabric has one profile; its default, ProfileStrict, takes the strictest
// combination, so that code correct on it is correct on the others.
// docs/SIMULATOR.md lists each difference with its source.
type Profile string

// The profiles.
const (
	// ProfileStrict: REARM only from MIGRATED, no new alternate while
	// ARMED, the requester's PATH_MIG raised the moment the HCA migrates
	// (before the peer has followed), no PATH_MIG_ERR ever, and no flush
	// completions for the QPs of a device that died.
	ProfileStrict Profile = "strict"
	// ProfileRdmavt: the software IB transport of qib and hfi1 (rdmavt's
	// rvt_modify_qp, qib_migrate_qp/hfi1_migrate_qp): a new alternate may
	// be loaded while ARMED and the QP stays ARMED on it; PATH_MIG at
	// migration; PATH_MIG_ERR never raised; a dead device's QPs are
	// flushed.
	ProfileRdmavt Profile = "rdmavt"
	// ProfileMlx5: ConnectX through the kernel mlx5 driver and libmlx5:
	// PATH_MIG_ERR when the migration fails (the driver maps
	// MLX5_EVENT_TYPE_PATH_MIG_FAILED to it), no flush completions on user
	// CQs after DEVICE_FATAL (the kernel makes them only for its own ULPs;
	// libmlx5 just marks the context fatal). The firmware's moment for
	// PATH_MIG is not documented: this profile raises it when the first
	// packet arrives on the new path, the other timing the layers must
	// survive. Everything else is strict.
	ProfileMlx5 Profile = "mlx5"
)

// Profiles lists every profile, the default first.
var Profiles = []Profile{ProfileStrict, ProfileRdmavt, ProfileMlx5}

// ParseProfile reads a profile name; "" is the default (strict).
func ParseProfile(s string) (Profile, error) {
	if s == "" {
		return ProfileStrict, nil
	}
	for _, p := range Profiles {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("sim: profile %q: want one of strict, rdmavt, mlx5", s)
}

// behaviour is what a profile decides, read by the model.
type behaviour struct {
	// rearmFromRearm: REARM is accepted on a QP already in REARM (rdmavt
	// refuses it only on ARMED). Strict takes it only from MIGRATED.
	rearmFromRearm bool
	// altWhileArmed: IBV_QP_ALT_PATH on an ARMED QP replaces the
	// alternate and the QP stays ARMED (rdmavt). Otherwise EINVAL.
	altWhileArmed bool
	// pathMigAtAnswer: the requester's PATH_MIG after an automatic
	// migration waits for the first packet from the peer on the new path;
	// otherwise it is raised at the migration itself.
	pathMigAtAnswer bool
	// pathMigErr: PATH_MIG_ERR is raised when a migration cannot be made
	// (alternate port down) or gets no answer.
	pathMigErr bool
	// fatalFlush: the QPs of a device that died complete their
	// outstanding WRs with WR_FLUSH_ERR.
	fatalFlush bool
}

func (p Profile) behaviour() behaviour {
	switch p {
	case ProfileRdmavt:
		return behaviour{rearmFromRearm: true, altWhileArmed: true, fatalFlush: true}
	case ProfileMlx5:
		return behaviour{pathMigAtAnswer: true, pathMigErr: true}
	}
	return behaviour{}
}

// Profile is the fabric's profile.
func (f *Fabric) Profile() Profile { return f.cfg.Profile }
