package ipam

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// hostIPAMKeys are the netconf `ipam` keys the host reads beside the module's: the
// table of codes/src/lib.rs (HOST_IPAM_KEYS), which a test holds this to.
var hostIPAMKeys = []string{
	"type", "module", "moduleSha256", "trustPolicy", "deadlineSeconds", "lockFile",
	"lockTimeoutSeconds", "dataDir", "cacheDir", "logFile", "logLevel", "nodeName",
	"memoryLimitMiB", "hostMemoryLimitMiB", "logLimitKiB", "logMaxMiB", "logFiles",
	"storeQuotaEntries", "storeQuotaMiB", "moduleMaxMiB", "compileTimeoutSeconds",
	"compileMemoryMiB", "store", "strictStatus",
}

// checkKeys refuses a key of the ipam section that is not a field of v's struct
// (by its json name), nor the host's, but is close to a field: a letter off, or the
// same but for case. encoding/json would match `PrefixLen` to `prefixLen` and ignore
// `strat`; the contract matches keys exactly, so both are named with the field they
// likely mean. A key close to no field (another tool's, a newer host's) is logged.
func checkKeys(section json.RawMessage, v any) *Error {
	fields := jsonFields(reflect.TypeOf(v))
	var keys map[string]json.RawMessage
	if fields == nil || json.Unmarshal(section, &keys) != nil {
		return nil
	}
	names := make([]string, 0, len(keys))
	for key := range keys {
		names = append(names, key)
	}
	sort.Strings(names)
	for _, key := range names {
		if slices.Contains(fields, key) || slices.Contains(hostIPAMKeys, key) {
			continue
		}
		if field, ok := closest(key, fields); ok {
			return InvalidConfig("ipam.%s is not a key of this module: did you mean %s? (keys match exactly, case included; its keys: %s)",
				key, field, strings.Join(fields, ", "))
		}
		Warnf("ipam.%s is neither a key of this module (%s) nor the host's: ignored", key, strings.Join(fields, ", "))
	}
	return nil
}

// jsonFields are the keys encoding/json decodes into t's struct (t a pointer to
// one): each exported field's json name, or its Go name; embedded structs' fields
// as their own. Nil when t is not a pointer to a struct.
func jsonFields(t reflect.Type) []string {
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	var fields []string
	var walk func(reflect.Type)
	walk = func(s reflect.Type) {
		for i := 0; i < s.NumField(); i++ {
			f := s.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" && !strings.Contains(tag, ",") {
				continue
			}
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fields = append(fields, name)
		}
	}
	walk(t.Elem())
	return fields
}

// closest is the field key most likely means: equal but for case, or within an edit
// or two (one for names of four letters or fewer).
func closest(key string, fields []string) (string, bool) {
	best, bestDistance := "", -1
	for _, field := range fields {
		d := distance(strings.ToLower(key), strings.ToLower(field))
		limit := 2
		if len(field) <= 4 {
			limit = 1
		}
		if d <= limit && (bestDistance < 0 || d < bestDistance) {
			best, bestDistance = field, d
		}
	}
	return best, bestDistance >= 0
}

// distance is the Levenshtein distance of a and b, by runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	row := make([]int, len(rb)+1)
	for j := range row {
		row[j] = j
	}
	for i, ca := range ra {
		diagonal := row[0]
		row[0] = i + 1
		for j, cb := range rb {
			above := row[j+1]
			cost := 1
			if ca == cb {
				cost = 0
			}
			row[j+1] = min(above+1, row[j]+1, diagonal+cost)
			diagonal = above
		}
	}
	return row[len(rb)]
}
