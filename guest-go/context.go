package ipam

import (
	"bytes"
	"encoding/json"
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
	if err := json.Unmarshal(conf.IPAM, v); err != nil {
		return InvalidConfig("invalid ipam configuration: %v", err)
	}
	return nil
}
