package ipam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
)

// Context is what the defaults of CHECK and GC ask a module's Allocations with: the
// network and node of the call, its lock grant as "now", and the network
// configuration.
type Context struct {
	NetworkName string
	NodeName    string
	Now         WallInstant
	// Config is the network configuration JSON, nil when the host has none.
	Config *string
}

// ContextOf is the Context of a CNI call.
func ContextOf(r *Request) *Context {
	return &Context{NetworkName: r.NetworkName, NodeName: r.NodeName, Now: r.LockGrantedAt, Config: &r.Config}
}

// IPAM decodes the configuration's `ipam` section into v (a missing section is
// `null`, which leaves v as it is): invalid JSON is code 6, a section that does not
// fit v code 7.
func (r *Request) IPAM(v any) *Error {
	return decodeIPAM(r.Config, v)
}

// IPAM decodes the configuration's `ipam` section into v, as Request.IPAM does;
// without a configuration it leaves v as it is.
func (c *Context) IPAM(v any) *Error {
	if c.Config == nil {
		return nil
	}
	return decodeIPAM(*c.Config, v)
}

func decodeIPAM(config string, v any) *Error {
	var conf struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	if err := json.Unmarshal([]byte(config), &conf); err != nil {
		return NewError(CodeDecodingFailure, "network configuration is not valid JSON").WithDetails(err.Error())
	}
	if len(conf.IPAM) == 0 || bytes.Equal(conf.IPAM, []byte("null")) {
		return nil
	}
	if err := checkKeys(conf.IPAM, v); err != nil {
		return err
	}
	if err := json.Unmarshal(conf.IPAM, v); err != nil {
		return InvalidConfig("%s", fieldError(conf.IPAM, v, err))
	}
	return nil
}

// fieldError says which key of the ipam section err is about, and its value, which
// encoding/json's messages do not both say (`cannot unmarshal string into Go struct
// field .n of type float64`; `ParseAddr("10.1.0.x"): unexpected character`):
// `invalid ipam.n ("fast"): ...`. A key is found by decoding each key alone into a
// fresh v.
func fieldError(section json.RawMessage, v any, err error) string {
	var keys map[string]json.RawMessage
	target := reflect.TypeOf(v)
	if json.Unmarshal(section, &keys) != nil || target.Kind() != reflect.Pointer {
		return "invalid ipam: " + err.Error()
	}
	names := make([]string, 0, len(keys))
	for key := range keys {
		names = append(names, key)
	}
	sort.Strings(names)
	for _, key := range names {
		alone, _ := json.Marshal(map[string]json.RawMessage{key: keys[key]})
		if keyErr := json.Unmarshal(alone, reflect.New(target.Elem()).Interface()); keyErr != nil {
			value := string(keys[key])
			if len(value) > 80 {
				value = value[:77] + "..."
			}
			return fmt.Sprintf("invalid ipam.%s (%s): %s", key, value, describe(keyErr))
		}
	}
	return "invalid ipam: " + describe(err)
}

// describe is encoding/json's message without the Go type names a module's user does
// not know: a type mismatch says what the JSON value is and what the key takes.
func describe(err error) string {
	var mismatch *json.UnmarshalTypeError
	if errors.As(err, &mismatch) {
		return fmt.Sprintf("a %s where %s is expected", mismatch.Value, mismatch.Type)
	}
	return err.Error()
}
