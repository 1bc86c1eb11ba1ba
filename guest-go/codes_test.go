package ipam

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The SDK's codes are the table's of codes/src/lib.rs, which the host and the Rust
// SDK share: every named code there is here with the same number, and no other.
func TestCodesAreTheSharedTable(t *testing.T) {
	text, err := os.ReadFile("../codes/src/lib.rs")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`pub const ([A-Z_0-9]+): u32 = (\d+);`).FindAllStringSubmatch(string(text), -1)
	if len(named) < 20 {
		t.Fatalf("found %d codes in codes/src/lib.rs", len(named))
	}
	for _, m := range named {
		want, _ := strconv.Atoi(m[2])
		got, ok := namedCodes[m[1]]
		if !ok || got != uint32(want) {
			t.Errorf("%s: codes/src/lib.rs has %d, the Go SDK %d (present: %v)", m[1], want, got, ok)
		}
	}
	if len(namedCodes) != len(named) {
		t.Errorf("the Go SDK names %d codes, codes/src/lib.rs %d", len(namedCodes), len(named))
	}
}
