//go:build !race

package recording_test

const raceEnabled = false
