package combat

import (
	"math"
	"strconv"
	"strings"
)

// parseNumber reads a finite number written as text ("2", " -1 ", "+3").
func parseNumber(s string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}
