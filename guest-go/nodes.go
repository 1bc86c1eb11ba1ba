package ipam

// Releasing a node that is gone (`wasm-ipam release-node`, `cni:ipam/nodes`), for a
// module whose store several nodes share.

// ReleasedAddress is one address released.
type ReleasedAddress struct {
	// Address alone, without a prefix length.
	Address     string
	ContainerID string
	Ifname      string
}

// ReleaseReport is what a release freed (or, in a dry run, would free).
type ReleaseReport struct {
	// Addresses of the node's attachments released.
	Addresses []ReleasedAddress
	// Blocks (or other per-node units) freed, as the module names them.
	Blocks []string
	// Notes are one line each for the operator: what was kept, and why.
	Notes []string
}

// NodeReleaser releases everything the module records for `node`, a node removed from
// the cluster, as if each of its attachments had been deleted. The host asks only once
// the node has made no committing call for a while; ctx.NodeName is the node the
// operator runs the command on. With dryRun the host refuses every write: answer what
// would be released. Without it, release-node is code 121.
type NodeReleaser interface {
	ReleaseNode(ctx *Context, node string, dryRun bool, store Store) (*ReleaseReport, *Error)
}

// ReleaseNode answers m's release of node: its own, or code 121.
func ReleaseNode(m Module, ctx *Context, node string, dryRun bool, store Store) (*ReleaseReport, *Error) {
	if r, ok := m.(NodeReleaser); ok {
		return r.ReleaseNode(ctx, node, dryRun, store)
	}
	return nil, Unsupported("this module keeps nothing per node: nothing to release for node %q", node)
}
