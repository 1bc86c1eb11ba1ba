package ipam

import (
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

type keysRange struct {
	Start     string `json:"start"`
	PrefixLen int    `json:"prefixLen"`
	Gateway   string `json:"gateway,omitempty"`
}

func TestAMisspeltOrMiscasedKeyIsRefusedNamingTheField(t *testing.T) {
	for key, field := range map[string]string{"strat": "start", "PrefixLen": "prefixLen", "prefixlen": "prefixLen", "gatway": "gateway"} {
		config := `{"ipam": {"start": "a", "prefixLen": 24, "` + key + `": 1}}`
		var r keysRange
		err := decodeIPAM(config, &r)
		want := "ipam." + key + " is not a key of this module: did you mean " + field + "?"
		if err == nil || err.Code != CodeInvalidNetworkConfig || !strings.HasPrefix(err.Msg, want) {
			t.Errorf("%s: %v, want %q", key, err, want)
		}
	}
}

func TestTheHostsKeysAndKeysCloseToNonePass(t *testing.T) {
	config := `{"ipam": {"start": "a", "prefixLen": 24, "type": "wasm-ipam", "module": "/m.wasm", "deadlineSeconds": 5, "store": {}`
	// A key close to none is logged through the host, which a wasip1 test run has not.
	if runtime.GOOS != "wasip1" {
		config += `, "somethingElse": true`
	}
	config += `}}`
	var r keysRange
	if err := decodeIPAM(config, &r); err != nil || r.PrefixLen != 24 {
		t.Fatalf("%v %+v", err, r)
	}
}

// The host's keys are the table's of codes/src/lib.rs, which the host and the Rust
// SDK share.
func TestHostKeysAreTheSharedTable(t *testing.T) {
	text, err := os.ReadFile("../codes/src/lib.rs")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile(`(?s)pub const HOST_IPAM_KEYS: &\[&str\] = &\[(.*?)\];`).FindStringSubmatch(string(text))
	if table == nil {
		t.Fatal("no HOST_IPAM_KEYS in codes/src/lib.rs")
	}
	var keys []string
	for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(table[1], -1) {
		keys = append(keys, m[1])
	}
	if strings.Join(keys, ",") != strings.Join(hostIPAMKeys, ",") {
		t.Errorf("codes/src/lib.rs: %v\nthe Go SDK: %v", keys, hostIPAMKeys)
	}
}
