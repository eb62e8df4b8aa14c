package cli

import (
	"fmt"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/secretfile"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The commands of node restriction (mesh/keys.go has the scheme):
// site-key makes the aggregators' secret, node-key derives the key one node
// is provisioned with, public-key prints what every node checks aggregators
// with.

// siteKeys loads the aggregator keys that the configuration names.
func siteKeys(c *cli, cfgPath string) (*mesh.Keys, int, bool) {
	path := cmdutil.ConfigPath(cfgPath, aggregator.DefaultConfigPath)
	cfg, err := aggregator.LoadConfig(path)
	if err != nil {
		return nil, c.fail(err), false
	}
	if cfg.Mesh.SiteKeyFile == "" {
		return nil, c.fail(fmt.Errorf("%s: mesh.site_key_file is not set (aggregator site-key FILE makes one)", path)), false
	}
	keys, err := cfg.Mesh.LoadKeys(gwpb.Role_ROLE_AGGREGATOR)
	if err != nil {
		return nil, c.fail(fmt.Errorf("%s: %w", path, err)), false
	}
	return keys, 0, true
}

func runNodeKey(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` naming mesh.site_key_file (default "+aggregator.DefaultConfigPath+")")
	out := f.String("out", "", "write the key to this `file` (mode 0600; never overwrites) instead of printing it")
	if code, ok := f.ParseN(args, 1, "NODE"); !ok {
		return code
	}
	keys, code, ok := siteKeys(c, *cfgPath)
	if !ok {
		return code
	}
	k, err := keys.NodeKey(f.Args()[0])
	if err != nil {
		return c.fail(err)
	}
	line := mesh.EncodeKey(k) + "\n"
	if *out == "" {
		fmt.Fprint(c.stdout, line)
		return exitOK
	}
	if err := secretfile.Create(*out, line); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "wrote the node key of %s to %s (mode 0600); install it on that node only, as its mesh.node_key_file\n", f.Args()[0], *out)
	return exitOK
}

func runPublicKey(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` naming mesh.site_key_file (default "+aggregator.DefaultConfigPath+")")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	keys, code, ok := siteKeys(c, *cfgPath)
	if !ok {
		return code
	}
	for _, k := range keys.PublicKeys() {
		fmt.Fprintln(c.stdout, mesh.EncodeKey(k))
	}
	return exitOK
}
