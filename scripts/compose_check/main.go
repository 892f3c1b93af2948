// composecheck loads a compose file with compose-go, the loader of `docker compose` (v2), and prints
// the project as JSON: validated against the Compose schema, interpolated, anchors merged, the given
// profiles applied. Offline: no Docker engine. Usage: composecheck FILE [PROFILE,PROFILE...]
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: composecheck FILE [PROFILE,PROFILE...]")
		os.Exit(2)
	}
	profiles := []string{}
	if len(os.Args) > 2 && os.Args[2] != "" {
		profiles = strings.Split(os.Args[2], ",")
	}
	opts, err := cli.NewProjectOptions(
		[]string{os.Args[1]},
		cli.WithName("quotagate"),
		cli.WithProfiles(profiles),
		cli.WithResolvedPaths(true),
	)
	if err == nil {
		var out []byte
		project, loadErr := cli.ProjectFromOptions(context.Background(), opts)
		if err = loadErr; err == nil {
			if out, err = project.MarshalJSON(); err == nil {
				os.Stdout.Write(out)
				return
			}
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
