package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pacer/pacer/bucket"
	"gopkg.in/yaml.v3"
)

// FlatCurve is the name of the built-in curve, bucket.Flat(24): the curve of
// a campaign that names none.
const FlatCurve = "flat"

// curveFile is a curve file's YAML form.
type curveFile struct {
	Name        string    `yaml:"name"`
	Slots       int       `yaml:"slots"`
	Description string    `yaml:"description"`
	Weights     []float64 `yaml:"weights"`
}

// ParseCurve parses a curve file:
//
//	name: evening-peak      # [a-z0-9_-], 1 to 64 bytes
//	slots: 24               # optional; must equal the number of weights
//	description: "..."      # optional
//	weights: [1, 1, ...]    # 24, 48, 96 or 1440 non-negative numbers
//
// Only the weights' ratios matter. Unknown keys are errors. ParseCurve does
// not know the file's name; LoadCurves checks that the two agree.
func ParseCurve(data []byte) (*bucket.Curve, error) {
	var f curveFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	if f.Name == "" {
		return nil, errors.New("name: missing; every curve file names its curve")
	}
	if f.Weights == nil {
		return nil, fmt.Errorf("curve %q: weights: missing", f.Name)
	}
	if f.Slots != 0 && f.Slots != len(f.Weights) {
		return nil, fmt.Errorf("curve %q: slots is %d but there are %d weights", f.Name, f.Slots, len(f.Weights))
	}
	c, err := bucket.NewCurve(f.Name, f.Weights)
	if err != nil {
		var ce *bucket.CurveError
		if errors.As(err, &ce) {
			if ce.Slot >= 0 {
				return nil, fmt.Errorf("curve %q: weights[%d]: %s", ce.Name, ce.Slot, ce.Reason)
			}
			return nil, fmt.Errorf("curve %q: %s", ce.Name, ce.Reason)
		}
		return nil, err
	}
	return c, nil
}

// MarshalCurve writes c as a curve file that ParseCurve reads back into
// exactly the same curve. The weights written are c's integer shares in
// parts per billion, not its float weights: they are what every host's
// arithmetic uses, and reading them back reproduces the cumulative table
// bit for bit, where re-normalised floats could move a share by one.
func MarshalCurve(c *bucket.Curve, description string) ([]byte, error) {
	if c == nil {
		return nil, errors.New("marshal curve: nil curve")
	}
	if !utf8.ValidString(description) {
		return nil, fmt.Errorf("marshal curve %q: description is not valid UTF-8", c.Name())
	}
	head := struct {
		Name        string `yaml:"name"`
		Slots       int    `yaml:"slots"`
		Description string `yaml:"description,omitempty"`
	}{c.Name(), c.Slots(), description}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(head); err != nil {
		return nil, fmt.Errorf("marshal curve %q: %w", c.Name(), err)
	}
	enc.Close()

	// A flow list, a fixed number per line: readable for 24 slots and still
	// compact for 1440.
	cum := c.Cumulative()
	perLine := 12
	if c.Slots() > 96 {
		perLine = 20
	}
	fmt.Fprintf(&b, "# weights: parts per billion of the day's budget, one per %s slot\n", slotLength(c.Slots()))
	b.WriteString("weights: [\n")
	for i := 0; i < c.Slots(); i++ {
		if i%perLine == 0 {
			b.WriteString("  ")
		}
		b.WriteString(strconv.FormatInt(cum[i+1]-cum[i], 10))
		b.WriteString(",")
		if i%perLine == perLine-1 || i == c.Slots()-1 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	b.WriteString("]\n")
	return b.Bytes(), nil
}

// slotLength names how long one slot of an n-slot curve is on a 24-hour day.
func slotLength(n int) string {
	m := 24 * 60 / n
	if m%60 == 0 {
		return fmt.Sprintf("%d-hour", m/60)
	}
	return fmt.Sprintf("%d-minute", m)
}

// LoadCurves reads every *.yaml file in the root of fsys as a curve file and
// returns the curves by name, always including the built-in "flat".
//
// Each file's curve name must equal its file name without ".yaml". A file
// named flat.yaml is refused: "flat" is what a campaign without a curve
// gets, so it must mean the same constant-rate curve on every host and in
// pacerctl, whatever one host's directory holds. Hidden files (".x.yaml",
// editor and ConfigMap leftovers) and directories are skipped; a *.yml file
// is an error rather than silently ignored, so a misnamed curve cannot
// vanish. Every bad file is reported; on any error the map is nil.
func LoadCurves(fsys fs.FS) (map[string]*bucket.Curve, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("curves: cannot list the directory: %w", err)
	}
	curves := map[string]*bucket.Curve{FlatCurve: bucket.Flat(24)}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		switch path.Ext(name) {
		case ".yml":
			errs = append(errs, fmt.Errorf("curves: %s: curve files must end in .yaml", name))
			continue
		case ".yaml":
		default:
			continue
		}
		stem := strings.TrimSuffix(name, ".yaml")
		if stem == FlatCurve {
			errs = append(errs, fmt.Errorf("curves: %s: %q is the built-in constant-rate curve and cannot be redefined; give this curve another name", name, FlatCurve))
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("curves: %w", err))
			continue
		}
		c, err := ParseCurve(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("curves: %s: %w", name, err))
			continue
		}
		if c.Name() != stem {
			errs = append(errs, fmt.Errorf("curves: %s: names curve %q; the name must match the file name (%s.yaml)", name, c.Name(), c.Name()))
			continue
		}
		if _, dup := curves[stem]; dup {
			errs = append(errs, fmt.Errorf("curves: %s: curve %q defined twice", name, stem))
			continue
		}
		curves[stem] = c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return curves, nil
}
