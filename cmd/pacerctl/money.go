package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

const microsPerUnit = 1_000_000

// Money suffixes. An amount is integer micros, bare or with the suffix
// "micros", or a decimal number of currency units with the suffix "units".
// The former suffix "u" is refused: it reads as µ (micro) to people who
// think in micros, which is off by a factor of 10^6.
const (
	suffixUnits  = "units"
	suffixMicros = "micros"
)

// parseMoney reads an amount of money as the operator types it: a plain
// integer is micros ("1500000", or "1500000micros"); a decimal number with
// the suffix "units" is currency units, at most 6 decimals ("1.5units" =
// 1,500,000 micros, "0.000001units" = 1 micro). Units are converted with
// integer arithmetic only, so no amount is ever rounded: "1.0000001units" is
// refused, not truncated. Negative amounts and amounts beyond int64 micros
// are refused.
func parseMoney(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("amount %q is negative", s)
	}
	if num, ok := strings.CutSuffix(s, suffixUnits); ok {
		return parseUnits(s, num)
	}
	num, micros := strings.CutSuffix(s, suffixMicros)
	if allDigits(num) {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
		return n, nil
	}
	if old, ok := strings.CutSuffix(s, "u"); ok && !micros && isDecimal(old) {
		return 0, fmt.Errorf("amount %q: the suffix u is no longer read (it looks like µ, micro); write %s%s for currency units or %s for micros",
			s, old, suffixUnits, microsOf(old))
	}
	if isDecimal(num) && !micros {
		return 0, fmt.Errorf("amount %q: a plain number is integer micros; write currency units with the suffix %s (%s%s)", s, suffixUnits, num, suffixUnits)
	}
	return 0, fmt.Errorf("amount %q: want integer micros (1500000) or currency units with the suffix %s (1.5%s)", s, suffixUnits, suffixUnits)
}

// parseUnits reads num, the number of s before its suffix "units".
func parseUnits(s, num string) (int64, error) {
	whole, frac, hasDot := strings.Cut(num, ".")
	if !allDigits(whole) || (hasDot && !allDigits(frac)) {
		return 0, fmt.Errorf("amount %q: want currency units such as 1.5%s or 12%s", s, suffixUnits, suffixUnits)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("amount %q has more than 6 decimals; 0.000001%s (1 micro) is the smallest amount", s, suffixUnits)
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

// isDecimal says whether s is digits with at most one decimal point inside.
func isDecimal(s string) bool {
	w, f, dot := strings.Cut(s, ".")
	return allDigits(w) && (!dot || allDigits(f))
}

// microsOf writes the micros of a decimal number of units, for an error
// message: "1.5" -> "1500000"; a phrase when it does not fit.
func microsOf(units string) string {
	n, err := parseUnits(units, units)
	if err != nil {
		return "the amount in micros"
	}
	return strconv.FormatInt(n, 10)
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

// formatUnits writes micros as exact currency units with the suffix
// "units", in the form parseMoney reads: 1500000 -> "1.5units",
// 1 -> "0.000001units".
func formatUnits(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-(micros+1))+1
	}
	whole, frac := u/microsPerUnit, u%microsPerUnit
	if frac == 0 {
		return fmt.Sprintf("%s%d%s", sign, whole, suffixUnits)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%06d", whole, frac), "0") + suffixUnits
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
