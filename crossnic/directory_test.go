package crossnic

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestMemDirectory(t *testing.T) {
	d := NewMemDirectory()
	def := Endpoint{LID: 9, QPN: 0x100}
	bk := Backup{Device: "mlx5_1", Port: 1, LID: 40, QPN: 0x104}
	if _, ok := d.LookupQP(def); ok {
		t.Fatal("lookup in an empty directory succeeded")
	}
	if err := d.PublishQP(def, bk); err != nil {
		t.Fatal(err)
	}
	if err := d.PublishQP(def, bk); err != nil {
		t.Fatalf("republishing the same mapping: %v", err)
	}
	if err := d.PublishQP(def, Backup{QPN: 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting publish: %v", err)
	}
	if got, ok := d.LookupQP(def); !ok || got != bk {
		t.Fatalf("lookup = %+v, %v", got, ok)
	}
	mr := MRRef{LID: 9, RKey: 0x1201}
	if err := d.PublishMR(mr, 0x3301); err != nil {
		t.Fatal(err)
	}
	if err := d.PublishMR(mr, 0x3302); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting MR publish: %v", err)
	}
	if k, ok := d.LookupMR(mr); !ok || k != 0x3301 {
		t.Fatalf("MR lookup = %#x, %v", k, ok)
	}
	if _, ok := d.LookupMR(MRRef{LID: 10, RKey: 0x1201}); ok {
		t.Fatal("an rkey of another port matched")
	}
}

func TestMemDirectoryConcurrent(t *testing.T) {
	d := NewMemDirectory()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				e := Endpoint{LID: uint16(g), QPN: uint32(i)}
				if err := d.PublishQP(e, Backup{QPN: uint32(i + 1)}); err != nil {
					panic(fmt.Sprint(err))
				}
				if b, ok := d.LookupQP(e); !ok || b.QPN != uint32(i+1) {
					panic("lost a mapping")
				}
			}
		}(g)
	}
	wg.Wait()
}
