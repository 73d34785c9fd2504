package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEQuickStart keeps the README's quick-start the code that
// TestFirstHour runs: Run, as in main.go, indented by four spaces.
func TestREADMEQuickStart(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	code := string(src)
	start := strings.Index(code, "// Run prints the changes")
	end := strings.Index(code[max(start, 0):], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatal("main.go has no Run function with its doc comment")
	}
	var block strings.Builder
	for _, line := range strings.Split(code[start:start+end+2], "\n") {
		if line != "" {
			line = "    " + strings.ReplaceAll(line, "\t", "    ")
		}
		block.WriteString(line + "\n")
	}
	if !strings.Contains(string(readme), block.String()) {
		t.Errorf("README.md does not show Run as main.go has it; its quick-start should be:\n%s", block.String())
	}
}
