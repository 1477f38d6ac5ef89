// Command retry-scheduler runs the service: `all` (worker + bridge + ops, the local default),
// `worker` or `bridge`. Configuration comes from the environment, overridden by flags
// (`retry-scheduler -h` lists them).
package main

import (
	"os"

	"github.com/retry-scheduler/retry-scheduler/internal/service"
)

func main() { os.Exit(service.Main(os.Args[1:])) }
