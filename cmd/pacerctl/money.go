package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

const microsPerUnit = 1_000_000

// parseMoney reads an amount of money as the operator types it: a plain
// integer is micros ("1500000"); a decimal number with the suffix "u" is
// currency units, at most 6 decimals ("1.5u" = 1,500,000 micros,
// "0.000001u" = 1 micro). Units are converted with integer arithmetic only,
// so no amount is ever rounded: "1.0000001u" is refused, not truncated.
// Negative amounts and amounts beyond int64 micros are refused.
func parseMoney(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("amount %q is negative", s)
	}
	num, units := strings.CutSuffix(s, "u")
	if !units {
		if !allDigits(num) {
			if w, f, ok := strings.Cut(num, "."); ok && allDigits(w) && allDigits(f) {
				return 0, fmt.Errorf("amount %q: a plain number is integer micros; write currency units with the suffix u (%su)", s, num)
			}
			return 0, fmt.Errorf("amount %q: want integer micros (1500000) or currency units with the suffix u (1.5u)", s)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
		return n, nil
	}
	whole, frac, hasDot := strings.Cut(num, ".")
	if !allDigits(whole) || (hasDot && !allDigits(frac)) {
		return 0, fmt.Errorf("amount %q: want currency units such as 1.5u or 12u", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("amount %q has more than 6 decimals; 0.000001u (1 micro) is the smallest amount", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/microsPerUnit {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	if w*microsPerUnit > math.MaxInt64-f {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	return w*microsPerUnit + f, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// formatUnits writes micros as exact currency units with the u suffix, in
// the form parseMoney reads: 1500000 -> "1.5u", 1 -> "0.000001u".
func formatUnits(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-(micros+1))+1
	}
	whole, frac := u/microsPerUnit, u%microsPerUnit
	if frac == 0 {
		return fmt.Sprintf("%s%du", sign, whole)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%06d", whole, frac), "0") + "u"
}

// moneyFlag is a flag.Value for an amount of money (see parseMoney) that
// remembers whether it was given.
type moneyFlag struct {
	micros int64
	set    bool
}

func (m *moneyFlag) String() string {
	if m == nil || !m.set {
		return ""
	}
	return strconv.FormatInt(m.micros, 10)
}

func (m *moneyFlag) Set(s string) error {
	v, err := parseMoney(s)
	if err != nil {
		return err
	}
	m.micros, m.set = v, true
	return nil
}
