package ipam

// What CNI STATUS reports of the node's network (`cni:ipam/readiness`, contract
// 0.2.5). The host answers STATUS itself, without the lock and without the store, from
// what the node's last calls recorded: a module says there what makes some ADDs fail
// while the node stays ready (a pool exhausted, a pool past its warning threshold),
// and clears it once it no longer holds. STATUS never fails for it unless the network
// opts in to `strictStatus`; the host logs it and `wasm-ipam stats --prometheus`
// exports it.

// Degraded replaces what this node's network reports as degraded, once the call ends
// (whatever its outcome); no condition clears it. A call that does not call it leaves
// the last report as it was. Each condition is a code of the table (140 up for the
// module's own) and a message naming what an operator can do.
func Degraded(conditions ...*Error) {
	list := make([]Error, 0, len(conditions))
	for _, c := range conditions {
		if c != nil {
			list = append(list, *c)
		}
	}
	reportDegraded(list)
}
