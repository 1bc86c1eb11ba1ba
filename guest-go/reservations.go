package ipam

// Addresses kept out of use in a network (`wasm-ipam reserve` and `unreserve`,
// `cni:ipam/reservations`): a gateway, a VIP, a range being migrated.

// Reservation is one address or CIDR kept out of use.
type Reservation struct {
	// CIDR is the address or CIDR reserved, as the module records it.
	CIDR string
	// Note is the operator's.
	Note string
	// Since is when it was made (Unix seconds).
	Since uint64
	// Held is its addresses a pod holds now (reserved with force): each stays out of
	// use once its holder is deleted.
	Held []string
}

// Reserver keeps reservations. Reserve keeps cidr out of use from the next ADD on, on
// every node (an address of it in use is an error unless force, which leaves the
// holder alone; reserving what is reserved updates the note); Unreserve ends the
// reservation of exactly cidr and answers what it was; Reservations lists them
// (read-only). ctx.Config is the operator's netconf. Without it, all three are code
// 121.
type Reserver interface {
	Reserve(ctx *Context, cidr, note string, force bool, store Store) (*Reservation, *Error)
	Unreserve(ctx *Context, cidr string, store Store) (*Reservation, *Error)
	Reservations(ctx *Context, store Store) ([]Reservation, *Error)
}

func noReservations(what string) *Error {
	return Unsupported("this module keeps no reservations%s", what)
}

// Reserve answers m's reservation of cidr: its own, or code 121.
func Reserve(m Module, ctx *Context, cidr, note string, force bool, store Store) (*Reservation, *Error) {
	if r, ok := m.(Reserver); ok {
		return r.Reserve(ctx, cidr, note, force, store)
	}
	return nil, noReservations(": cannot reserve " + cidr)
}

// Unreserve answers m's end of the reservation of cidr: its own, or code 121.
func Unreserve(m Module, ctx *Context, cidr string, store Store) (*Reservation, *Error) {
	if r, ok := m.(Reserver); ok {
		return r.Unreserve(ctx, cidr, store)
	}
	return nil, noReservations(": cannot unreserve " + cidr)
}

// Reservations answers m's reservations: its own, or code 121.
func Reservations(m Module, ctx *Context, store Store) ([]Reservation, *Error) {
	if r, ok := m.(Reserver); ok {
		return r.Reservations(ctx, store)
	}
	return nil, noReservations("")
}
