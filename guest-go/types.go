package ipam

// The records and enums of `cni:ipam/types` (wit/ipam.wit) that the handler world
// uses, as plain Go values. The glue (abi_wasip1.go) lifts and lowers exactly these;
// contract.golden says where each field lives in memory.

// Command is the CNI operation being performed (WIT enum `command`).
type Command uint8

const (
	CmdAdd Command = iota
	CmdDel
	CmdCheck
	CmdGC
	CmdStatus
)

func (c Command) String() string {
	switch c {
	case CmdAdd:
		return "ADD"
	case CmdDel:
		return "DEL"
	case CmdCheck:
		return "CHECK"
	case CmdGC:
		return "GC"
	case CmdStatus:
		return "STATUS"
	}
	return "UNKNOWN"
}

// WallInstant is a wall-clock instant since the Unix epoch.
type WallInstant struct {
	Seconds     uint64
	Nanoseconds uint32
}

// Arg is one CNI_ARGS pair, in the order the runtime gave it.
type Arg struct {
	Key, Value string
}

// Request is one CNI invocation, as the runtime made it (WIT record `request`).
type Request struct {
	Command     Command
	ContainerID string
	Netns       string
	Ifname      string
	Args        []Arg
	NetworkName string
	CNIVersion  string
	// Config is the whole network configuration JSON; a module reads its own keys.
	Config string
	// PrevResult is `prevResult` as JSON, nil when the runtime sent none.
	PrevResult *string
	// LockGrantedAt is when the host was granted the lock: a timestamp, not a timer.
	LockGrantedAt WallInstant
	NodeName      string
}

// Arg returns the value of CNI_ARGS key `key` and whether it is present.
func (r *Request) Arg(key string) (string, bool) {
	for _, a := range r.Args {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
}

// Attachment is one attachment the runtime still uses (CNI GC's valid attachments).
type Attachment struct {
	ContainerID string
	Ifname      string
}

// IPConfig is an address handed out: Address is a CIDR (`10.1.2.3/24`).
type IPConfig struct {
	Address string
	Gateway *string
}

// Route is a route of the ADD result. MTU, AdvMSS, Priority, Table and Scope are CNI
// 1.1 attributes; the host prints them only for cniVersion 1.1.0 and up.
type Route struct {
	Dst      string
	GW       *string
	MTU      *uint32
	AdvMSS   *uint32
	Priority *uint32
	Table    *uint32
	// Scope as `ip route` numbers it (0 universe, 253 link, 254 host).
	Scope *uint8
}

// DNS is the DNS part of the ADD result.
type DNS struct {
	Nameservers []string
	Domain      *string
	Search      []string
	Options     []string
}

// Result is what ADD hands out (WIT record `ipam-result`).
type Result struct {
	IPs    []IPConfig
	Routes []Route
	DNS    DNS
}

// Some returns a pointer to v: for the optional fields above
// (`Gateway: ipam.Some("10.0.0.1")`).
func Some[T any](v T) *T { return &v }
