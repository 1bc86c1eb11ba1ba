package ipam

import (
	"sort"
	"strings"
)

// Entry is one key and its value, as List and Peek answer them.
type Entry struct {
	Key   string
	Value []byte
}

// Store is the network's key/value store, as a handler is given it. In a host it is
// HostStore: reads see this call's own writes, and the writes are staged by the host
// and committed atomically only when the handler returns no error (on an error, a
// trap or the deadline they are discarded). A module's unit tests pass a MemoryStore.
type Store interface {
	// Get returns the value under key and whether it is present.
	Get(key string) ([]byte, bool)
	// Put stores value under key; a write the host refuses (too large, or in a call
	// that may only read) is code 120 with the host's reason in Details.
	Put(key string, value []byte) *Error
	// Delete removes key and returns whether it was present.
	Delete(key string) (bool, *Error)
	// List returns every entry whose key starts with prefix, in key order.
	List(prefix string) []Entry
	// Peek is List for figures that only inform (a pool's use for a warning): in a
	// store several nodes share, what it reads is not checked at the commit. Never
	// decide an allocation from it.
	Peek(prefix string) []Entry
	// CommitRoom is how many more distinct keys this call may read or write before its
	// commit exceeds what the store takes in one transaction (etcd's --max-txn-ops,
	// `ipam.store.maxTxnOps`), and false when the store has no such limit (the
	// embedded store). A key read and then written counts once; a List counts once
	// for the prefix and once per key it answers; Peek costs nothing. Bound work that
	// is not the call's own (sweeping, freeing) by it.
	CommitRoom() (uint32, bool)
}

// MemoryStore is an in-memory Store for unit tests of module logic.
type MemoryStore struct {
	Entries map[string][]byte
	// Room is what CommitRoom answers: nil for a store without a transaction limit.
	Room *uint32
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{Entries: map[string][]byte{}}
}

func (m *MemoryStore) Get(key string) ([]byte, bool) {
	v, ok := m.Entries[key]
	return v, ok
}

func (m *MemoryStore) Put(key string, value []byte) *Error {
	if m.Entries == nil {
		m.Entries = map[string][]byte{}
	}
	m.Entries[key] = append([]byte(nil), value...)
	return nil
}

func (m *MemoryStore) Delete(key string) (bool, *Error) {
	_, ok := m.Entries[key]
	delete(m.Entries, key)
	return ok, nil
}

func (m *MemoryStore) List(prefix string) []Entry {
	var out []Entry
	for k, v := range m.Entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, Entry{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (m *MemoryStore) Peek(prefix string) []Entry { return m.List(prefix) }

func (m *MemoryStore) CommitRoom() (uint32, bool) {
	if m.Room == nil {
		return 0, false
	}
	return *m.Room, true
}

// storeRefused is the SDK's code 120 for a write the host refused, its reason in
// Details.
func storeRefused(why string) *Error {
	return &Error{Code: CodeStoreWriteRefused, Msg: "store write refused", Details: why}
}
