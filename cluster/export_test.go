package cluster

// Crash stops the node's embedded NATS server at once, as a SIGKILL of its
// process would for the other nodes: its routes drop, its subscriptions
// vanish, and it releases nothing. The relay around it keeps running,
// unable to reach the cluster, until the test closes it.
func (n *Node) Crash() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
}
