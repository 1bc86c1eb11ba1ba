//go:build wasip1

package ipam

// The functions the host provides (`import deadline; import store; import log;
// import readiness;` of the world), each a `go:wasmimport` of its core signature and a Go function that
// lowers its arguments, calls it and lifts its answer. A function the contract adds
// (0.2.4's `store.commit-room`, say) is one more import here, its return area's
// layout in abi_wasip1.go and its line in contract.golden.

import (
	"time"
	"unsafe"
)

//go:wasmimport cni:ipam/deadline@0.2.5 budget
func deadlineBudget() uint64

//go:wasmimport cni:ipam/deadline@0.2.5 remaining
func deadlineRemaining() uint64

//go:wasmimport cni:ipam/deadline@0.2.5 expired
func deadlineExpired() uint32

//go:wasmimport cni:ipam/store@0.2.5 get
func storeGet(key, keyLen, ret uint32)

//go:wasmimport cni:ipam/store@0.2.5 put
func storePut(key, keyLen, value, valueLen, ret uint32)

//go:wasmimport cni:ipam/store@0.2.5 delete
func storeDelete(key, keyLen, ret uint32)

//go:wasmimport cni:ipam/store@0.2.5 list-prefix
func storeListPrefix(prefix, prefixLen, ret uint32)

//go:wasmimport cni:ipam/store@0.2.5 peek-prefix
func storePeekPrefix(prefix, prefixLen, ret uint32)

//go:wasmimport cni:ipam/log@0.2.5 log
func logLog(level, message, messageLen uint32)

//go:wasmimport cni:ipam/store@0.2.5 commit-room
func storeCommitRoom(ret uint32)

//go:wasmimport cni:ipam/readiness@0.2.5 degraded
func readinessDegraded(conditions, count uint32)

func stringArg(s string) (uint32, uint32) {
	return addrOf(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

func bytesArg(b []byte) (uint32, uint32) {
	return addrOf(unsafe.Pointer(unsafe.SliceData(b))), uint32(len(b))
}

// liftStoreError lifts a store-error variant at p: too-large(string) or
// read-only(string), both a refusal whose reason the host wrote.
func liftStoreError(p uint32) *Error {
	return storeRefused(liftString(p + storeErrorPayload))
}

// HostStore is the host's store of this network: what the SDK passes to a module's
// handlers in a host.
type HostStore struct{}

func (HostStore) Get(key string) ([]byte, bool) {
	from := mark()
	defer release(from)
	ret, _ := alloc(getReturnSize)
	k, n := stringArg(key)
	storeGet(k, n, ret)
	keep(key)
	value := liftOption(ret, payload4, liftBytes)
	if value == nil {
		return nil, false
	}
	return *value, true
}

func (HostStore) Put(key string, value []byte) *Error {
	from := mark()
	defer release(from)
	ret, _ := alloc(writeReturnSize)
	k, kn := stringArg(key)
	v, vn := bytesArg(value)
	storePut(k, kn, v, vn, ret)
	keep(key)
	keep(value)
	if load8(ret) != 0 {
		return liftStoreError(ret + payload4)
	}
	return nil
}

func (HostStore) Delete(key string) (bool, *Error) {
	from := mark()
	defer release(from)
	ret, _ := alloc(writeReturnSize)
	k, n := stringArg(key)
	storeDelete(k, n, ret)
	keep(key)
	if load8(ret) != 0 {
		return false, liftStoreError(ret + payload4)
	}
	return load8(ret+payload4) != 0, nil
}

func liftEntry(p uint32) Entry {
	return Entry{liftString(p + entryKey), liftBytes(p + entryValue)}
}

func listWith(call func(prefix, prefixLen, ret uint32), prefix string) []Entry {
	from := mark()
	defer release(from)
	ret, _ := alloc(listReturnSize)
	p, n := stringArg(prefix)
	call(p, n, ret)
	keep(prefix)
	return liftList(ret, entrySize, liftEntry)
}

func (HostStore) List(prefix string) []Entry { return listWith(storeListPrefix, prefix) }
func (HostStore) Peek(prefix string) []Entry { return listWith(storePeekPrefix, prefix) }

func (HostStore) CommitRoom() (uint32, bool) {
	from := mark()
	defer release(from)
	ret, _ := alloc(commitRoomReturnSize)
	storeCommitRoom(ret)
	room := liftOption(ret, payload4, load32)
	if room == nil {
		return 0, false
	}
	return *room, true
}

func reportDegraded(conditions []Error) {
	from := mark()
	defer release(from)
	list, _ := alloc(8)
	lowerList(list, errorSize, conditions, func(p uint32, e Error) { lowerError(p, &e) })
	readinessDegraded(load32(list), load32(list+4))
}

// Budget is the call's whole time budget, counted from the host's lock grant.
func Budget() time.Duration { return time.Duration(deadlineBudget()) }

// Remaining is the budget left; zero once the deadline has passed.
func Remaining() time.Duration { return time.Duration(deadlineRemaining()) }

// Expired says whether the deadline has passed (the host stops the module soon
// after).
func Expired() bool { return deadlineExpired() != 0 }

func logAt(level Level, message string) {
	p, n := stringArg(message)
	logLog(uint32(level), p, n)
	keep(message)
}
