//go:build !wasip1

package ipam

import "testing"

func TestDegradedIsWhatTheLastCallReported(t *testing.T) {
	if got := LastReported(); got != nil {
		t.Fatalf("nothing reported yet, got %+v", got)
	}
	Degraded(NewError(140, "range set 0 (10.1.0.0/30) has no address left"), nil)
	got := LastReported()
	if len(got) != 1 || got[0].Code != 140 || got[0].Msg != "range set 0 (10.1.0.0/30) has no address left" {
		t.Fatalf("got %+v", got)
	}
	Degraded()
	if got := LastReported(); got == nil || len(got) != 0 {
		t.Errorf("a clearing report is an empty list, got %#v", got)
	}
	if got := LastReported(); got != nil {
		t.Errorf("LastReported forgets what it answered, got %+v", got)
	}
}
