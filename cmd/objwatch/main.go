// Command objwatch runs the objwatch API server and its tools.
package main

import (
	"os"

	"github.com/objwatch/objwatch/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
