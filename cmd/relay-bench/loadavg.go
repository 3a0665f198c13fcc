package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// busyLoad is the one-minute load average above which a run warns that
// the machine was busy with other work.
const busyLoad = 1.0

// readLoadAverage returns the one-minute load average (Linux
// /proc/loadavg).
func readLoadAverage() (float64, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	return parseLoadAverage(string(data))
}

// parseLoadAverage reads the first field of /proc/loadavg's text.
func parseLoadAverage(s string) (float64, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return 0, errors.New("empty load average")
	}
	return strconv.ParseFloat(fields[0], 64)
}
