// The testbed's CoreDNS: the coredns module as a library with only the plugins the real nodes
// need (the stock binary links every cloud provider's SDK). Serves the cluster zone from the
// API server (headless Services: JobSet's pod names) and the reverse zone.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func init() {
	// The order in which a query passes through the plugins (coredns' plugin.cfg order).
	dnsserver.Directives = []string{"bind", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
