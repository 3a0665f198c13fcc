// Package node assembles a relay: everything `relay serve` runs, as a
// value that a test or another program can start and stop in process.
//
// Start builds the layers from the bottom up:
//
//  1. the stores of the data directory: the API keys (relay.db), the
//     embedded worlds (world.Host, worlds/<clientId>), the event hub that
//     numbers and publishes their events, and the demo world and admin
//     key on a first start;
//  2. the worlds as the services see them: the registry of the embedded
//     worlds (package embedded: rules, events, files and scripts applied
//     to each engine), followed by the linked worlds (package link);
//  3. the gRPC services with their interceptor chain (package server),
//     and the REST and SSE gateway that calls them through the server's
//     in-process connection (package gateway), with the web console
//     beside it;
//  4. the network: one listener (two with Config.GRPCListen) under the
//     connection caps and write stall guard (package netlimit), whose
//     connections go to gRPC's own transport or to the HTTP server by
//     their first bytes (package connroute), the HTTP server with the
//     access log and metrics (package observe), the tabletop module's
//     endpoints routed to the link service before the gateway, and the
//     metrics on their own address.
//
// Close takes them down in the opposite order. Config holds every setting;
// DefaultConfig gives the defaults of the command line's flags.
//
// A test binary that starts a node whose scripts run must serve as an
// execute-js worker too: its TestMain calls script.WorkerMain first (as
// relaytest.Main does).
package node
