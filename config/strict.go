package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

func typeOf(ptr any) reflect.Type { return reflect.TypeOf(ptr).Elem() }

// checkTypes walks a YAML node against the Go type it will be decoded into
// and returns one error per problem, each with its line and dotted key path.
// yaml.v3 alone would say "field windw not found in type config.Lease" or
// silently truncate 1.5 into an int64; this says "lease.windw" and refuses.
//
// The walk follows t, which is not recursive, so it terminates even on
// YAML aliases that refer to their own ancestors.
func checkTypes(n *yaml.Node, t reflect.Type, path string) []error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	bad := func(format string, args ...any) []error {
		return []error{fmt.Errorf("line %d: %s: %s", n.Line, displayPath(path), fmt.Sprintf(format, args...))}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// yaml.v3 would keep the default for some types and zero others;
		// say what is meant instead.
		return bad(`no value; write one (such as "" or []) or leave the key out`)
	}

	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if t == reflect.TypeFor[FileMode]() {
			if _, err := parseFileMode(n); err != nil {
				return bad("%v", err)
			}
		}
		return nil
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return bad("want a duration such as 30s or 100ms")
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return bad("%q is not a duration such as 30s or 100ms (a unit is required)", n.Value)
		}
		return nil
	case t.Kind() == reflect.Struct:
		return checkMapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return bad("want a list, such as [a, b]")
		}
		var errs []error
		for i, el := range n.Content {
			errs = append(errs, checkTypes(el, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			return bad("want a string")
		}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return bad("%s is not an integer", describe(n))
		}
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			return bad("%s is out of range", n.Value)
		}
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return bad("%s is not true or false", describe(n))
		}
	case t.Kind() == reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			return bad("%s is not a number", describe(n))
		}
	}
	return nil
}

func checkMapping(n *yaml.Node, t reflect.Type, path string) []error {
	if n.Kind != yaml.MappingNode {
		where := "the file"
		if path != "" {
			where = path
		}
		return []error{fmt.Errorf("line %d: %s: want a mapping of keys, got %s", n.Line, where, describe(n))}
	}
	fields := make(map[string]reflect.StructField, t.NumField())
	var known []string
	for _, f := range yamlFields(t) {
		name := yamlName(f)
		fields[name] = f
		known = append(known, name)
	}
	var errs []error
	firstLine := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := joinPath(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("line %d: %s: keys must be plain names", k.Line, displayPath(path)))
			continue
		}
		if first, dup := firstLine[k.Value]; dup {
			errs = append(errs, fmt.Errorf("line %d: %s: key appears twice (first at line %d)", k.Line, key, first))
			continue
		}
		firstLine[k.Value] = k.Line
		f, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: unknown key %q (known keys%s: %s)",
				k.Line, key, inPath(path), strings.Join(known, ", ")))
			continue
		}
		errs = append(errs, checkTypes(v, f.Type, key)...)
	}
	return errs
}

// yamlFields returns the fields of struct type t that have a YAML key, in
// order, with the fields of an inline struct (config.Daemon's daemon.Config)
// in its place.
func yamlFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "" && opts == "inline" && f.Type.Kind() == reflect.Struct:
			out = append(out, yamlFields(f.Type)...)
		case name != "" && name != "-":
			out = append(out, f)
		}
	}
	return out
}

// yamlName is a field's YAML key.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

func inPath(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// describe names a node for an error: its value if a scalar, else its kind.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return "something else"
}
