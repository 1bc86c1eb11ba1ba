//go:build !wasip1

package ipam

// Outside a wasip1 build there is no host: a module's native tests use a
// MemoryStore, and the host's functions panic if called.

import "time"

const noHost = "wasm-ipam: no host outside a wasip1 build: test module logic over a MemoryStore"

// HostStore is the host's store; natively there is none and its methods panic.
type HostStore struct{}

func (HostStore) Get(string) ([]byte, bool)    { panic(noHost) }
func (HostStore) Put(string, []byte) *Error    { panic(noHost) }
func (HostStore) Delete(string) (bool, *Error) { panic(noHost) }
func (HostStore) List(string) []Entry          { panic(noHost) }
func (HostStore) Peek(string) []Entry          { panic(noHost) }
func (HostStore) CommitRoom() (uint32, bool)   { panic(noHost) }
func Budget() time.Duration                    { panic(noHost) }
func Remaining() time.Duration                 { panic(noHost) }
func Expired() bool                            { panic(noHost) }
func logAt(Level, string)                      {}
