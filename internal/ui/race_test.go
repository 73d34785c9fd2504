//go:build race

package ui_test

// raceEnabled: the race detector multiplies CPU times (TestBrowserLiveLoad).
const raceEnabled = true
