package ownerproto

import (
	"os"
	"os/exec"
	"testing"
)

func TestStartTimeAndAlive(t *testing.T) {
	me, err := StartTime(os.Getpid())
	if err != nil || me == 0 {
		t.Fatalf("StartTime(self) = %d, %v", me, err)
	}
	if ok, err := Alive(os.Getpid(), me); !ok || err != nil {
		t.Fatalf("Alive(self) = %v, %v", ok, err)
	}
	if ok, _ := Alive(os.Getpid(), me+1); ok {
		t.Fatal("another incarnation of our pid reported alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if ok, err := Alive(pid, 0); ok || err != nil {
		t.Fatalf("Alive(reaped child) = %v, %v", ok, err)
	}
}
