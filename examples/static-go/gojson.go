package main

// Go 1.19's `encoding/json` decoding into typed structs, as static's configuration
// meets it (examples/static-py/src/gojson.py in Go). Parity with the reference plugin
// covers its error messages, and most of those are encoding/json's: a value of the
// wrong JSON type is recorded and decoding goes on (the first such error wins, named
// by the innermost struct and the path of JSON keys), while an error from a type's own
// decoder (a route, an IP address) stops decoding at once and takes the outermost
// position. Keys match struct fields exactly, else case-insensitively; unknown keys
// are ignored; `null` leaves a value as it was. The Go this module is built with words
// these errors otherwise (its encoding/json is 1.19's no more), hence this file.

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A document is decoded into: nil (null), string, bool, numberText, []any (array) or
// *object (an object's pairs in document order, duplicates kept: Go applies each in
// turn, so the last of two keys naming one field wins).
type numberText string

type pair struct {
	key   string
	value any
}

type object struct{ pairs []pair }

// asInt is the number as a Go int, if it is an integer literal that fits.
func (n numberText) asInt() (int64, bool) {
	text := strings.TrimPrefix(string(n), "-")
	if text == "" || strings.Trim(text, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	return v, err == nil
}

// loads parses a JSON document into the form above.
func loads(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	v, err := readValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON after the document")
	}
	return v, nil
}

func readValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := readValue(d)
				if err != nil {
					return nil, err
				}
				o.pairs = append(o.pairs, pair{k.(string), v})
			}
			_, err := d.Token()
			return o, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := readValue(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		return numberText(t), nil
	default:
		return t, nil
	}
}

// goError is an error whose text is the reference plugin's.
type goError struct{ msg string }

func (e *goError) Error() string { return e.msg }

// unmarshalTypeError is Go's `*json.UnmarshalTypeError` as 1.19 words it.
type unmarshalTypeError struct {
	value, goType string
	inStruct      bool
	structName    string
	field         string
}

func (e *unmarshalTypeError) Error() string {
	if e.inStruct {
		return fmt.Sprintf("json: cannot unmarshal %s into Go struct field %s.%s of type %s", e.value, e.structName, e.field, e.goType)
	}
	return fmt.Sprintf("json: cannot unmarshal %s into Go value of type %s", e.value, e.goType)
}

// abort carries an error from a type's own decoder, which stops decoding.
type abort struct{ err error }

type decoder struct {
	saved      error
	structName *string
	fields     []string
}

func (d *decoder) addContext(err error) error {
	if e, ok := err.(*unmarshalTypeError); ok && (d.structName != nil || len(d.fields) > 0) {
		e.inStruct = true
		if d.structName != nil {
			e.structName = *d.structName
		}
		e.field = strings.Join(d.fields, ".")
	}
	return err
}

func (d *decoder) save(err *unmarshalTypeError) {
	if d.saved == nil {
		d.saved = d.addContext(err)
	}
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case numberText:
		return "number"
	case bool:
		return "bool"
	case *object:
		return "object"
	case []any:
		return "array"
	}
	return "null"
}

// goType is a Go type a document is decoded into: its name as Go prints it, its zero
// value, and how a JSON value decodes into it (given its current value).
type goType interface {
	name() string
	zero() any
	decode(d *decoder, v any, current any) any
}

func mismatch(d *decoder, t goType, v any, current any) any {
	d.save(&unmarshalTypeError{value: kind(v), goType: t.name()})
	return current
}

type strType struct{}

func (strType) name() string { return "string" }
func (strType) zero() any    { return "" }
func (t strType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return current
	case string:
		return v
	}
	return mismatch(d, t, v, current)
}

type intType struct{}

func (intType) name() string { return "int" }
func (intType) zero() any    { return int64(0) }
func (t intType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return current
	case numberText:
		n, ok := v.asInt()
		if !ok {
			d.save(&unmarshalTypeError{value: "number " + string(v), goType: "int"})
			return current
		}
		return n
	}
	return mismatch(d, t, v, current)
}

type boolType struct{}

func (boolType) name() string { return "bool" }
func (boolType) zero() any    { return false }
func (t boolType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return current
	case bool:
		return v
	}
	return mismatch(d, t, v, current)
}

// interfaceType is `interface{}`: any JSON value, kept as decoded.
type interfaceType struct{}

func (interfaceType) name() string                    { return "interface {}" }
func (interfaceType) zero() any                       { return nil }
func (interfaceType) decode(_ *decoder, v, _ any) any { return v }

// ipType is `net.IP`: decoded from text by `net.ParseIP`; `""` and `null` are no
// address. Decoded as []byte (16 bytes) or nil.
type ipType struct{}

func (ipType) name() string { return "net.IP" }
func (ipType) zero() any    { return []byte(nil) }
func (t ipType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return []byte(nil)
	case string:
		if v == "" {
			return []byte(nil)
		}
		ip := parseIP(v)
		if ip == nil {
			panic(abort{&parseError{"IP address", v}})
		}
		return ip
	}
	return mismatch(d, t, v, current)
}

type sliceType struct{ elem goType }

func (t sliceType) name() string { return "[]" + t.elem.name() }
func (sliceType) zero() any      { return []any(nil) }
func (t sliceType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return []any(nil)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = t.elem.decode(d, e, t.elem.zero())
		}
		return out
	}
	return mismatch(d, t, v, current)
}

type mapType struct{ elem goType }

func (t mapType) name() string { return "map[string]" + t.elem.name() }
func (mapType) zero() any      { return map[string]any(nil) }
func (t mapType) decode(d *decoder, v any, current any) any {
	switch v := v.(type) {
	case nil:
		return map[string]any(nil)
	case *object:
		out := map[string]any{}
		cur, _ := current.(map[string]any)
		for k, x := range cur {
			out[k] = x
		}
		for _, p := range v.pairs {
			out[p.key] = t.elem.decode(d, p.value, t.elem.zero())
		}
		return out
	}
	return mismatch(d, t, v, current)
}

// ptrType is a pointer: `null` is nil; anything else is decoded into a new value. A
// type error names the pointed-to type, as Go's does.
type ptrType struct{ elem goType }

func (t ptrType) name() string { return "*" + t.elem.name() }
func (ptrType) zero() any      { return nil }
func (t ptrType) decode(d *decoder, v any, current any) any {
	if v == nil {
		return nil
	}
	if current == nil {
		current = t.elem.zero()
	}
	return t.elem.decode(d, v, current)
}

type field struct {
	key string
	typ goType
}

// structType decodes into a map of its fields' keys; `short` is the name 1.19 gives
// the struct in an error's "Go struct field" (empty for an anonymous struct).
type structType struct {
	full, short string
	fields      []field
}

func (t structType) name() string { return t.full }
func (t structType) zero() any {
	out := map[string]any{}
	for _, f := range t.fields {
		out[f.key] = f.typ.zero()
	}
	return out
}

// fold is Go's case folding of a key against an ASCII field name (`ſ` folds to `s`,
// and the Kelvin sign lowers to `k`).
func fold(key string) string {
	return strings.ToLower(strings.ReplaceAll(key, "\u017f", "s"))
}

func (t structType) field(key string) *field {
	for i := range t.fields {
		if t.fields[i].key == key {
			return &t.fields[i]
		}
	}
	folded := fold(key)
	for i := range t.fields {
		if strings.ToLower(t.fields[i].key) == folded {
			return &t.fields[i]
		}
	}
	return nil
}

func (t structType) decode(d *decoder, v any, current any) any {
	o, ok := v.(*object)
	if v == nil {
		return current
	}
	if !ok {
		return mismatch(d, t, v, current)
	}
	out := t.zero().(map[string]any)
	cur, _ := current.(map[string]any)
	for k, x := range cur {
		out[k] = x
	}
	for _, p := range o.pairs {
		f := t.field(p.key)
		if f == nil {
			continue
		}
		outerStruct, outerLen := d.structName, len(d.fields)
		short := t.short
		d.structName = &short
		d.fields = append(d.fields, f.key)
		out[f.key] = f.typ.decode(d, p.value, out[f.key])
		// Restored only on success: an error from a type's own decoder reports where
		// it happened.
		d.structName = outerStruct
		d.fields = d.fields[:outerLen]
	}
	return out
}

// customType is a type with its own `UnmarshalJSON`: it gets any JSON value, `null`
// included, and its error stops decoding.
type customType struct {
	full string
	fn   func(any) (any, error)
}

func (t customType) name() string { return t.full }
func (customType) zero() any      { return nil }
func (t customType) decode(_ *decoder, v any, _ any) any {
	out, err := t.fn(v)
	if err != nil {
		panic(abort{err})
	}
	return out
}

// unmarshal is Go's `json.Unmarshal` of the decoded document v into t; it returns
// the error Go's would.
func unmarshal(t goType, v any) (out any, err error) {
	d := &decoder{}
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(abort)
			if !ok {
				panic(r)
			}
			out, err = nil, d.addContext(a.err)
		}
	}()
	out = t.decode(d, v, t.zero())
	if d.saved != nil {
		return nil, d.saved
	}
	return out, nil
}
