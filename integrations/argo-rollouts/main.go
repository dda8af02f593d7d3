// Command dwara-argo-rollouts is an Argo Rollouts traffic-router plugin
// (TrafficRouterPlugin over hashicorp/go-plugin, as Argo Rollouts loads
// it) that drives a Dwara split: each call of the rollout controller
// becomes a call of Dwara's REST API on the service the Rollout names
// (Config). See docs/integrations.md, "Argo Rollouts".
package main

import (
	rolloutsPlugin "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	goPlugin "github.com/hashicorp/go-plugin"
)

// handshake is Argo Rollouts' handshake for traffic-router plugins.
var handshake = goPlugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
	MagicCookieValue: "trafficrouter",
}

func main() {
	goPlugin.Serve(&goPlugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins: map[string]goPlugin.Plugin{
			"RpcTrafficRouterPlugin": &rolloutsPlugin.RpcTrafficRouterPlugin{Impl: &Router{}},
		},
	})
}
