//go:build race

package controller_test

// raceEnabled: the race detector slows the server about fivefold, so
// measurements use fewer objects.
const raceEnabled = true
