package skip

import "testing"

func TestRuns(t *testing.T) {}

func TestNeedsTool(t *testing.T) {
	t.Skip("librdmacm-dev is not installed (rdma/rdma_cma.h missing)")
}

func TestSub(t *testing.T) {
	t.Run("skipped", func(t *testing.T) { t.Skipf("profile %s has no APM", "roce") })
	t.Run("ran", func(t *testing.T) {})
}

func TestSkipNow(t *testing.T) { t.SkipNow() }
