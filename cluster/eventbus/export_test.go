package eventbus

// StallFeed stops the consumer of a followed world's feed without the bus
// knowing, as an ordered consumer that went silent after its stream lost
// its leader.
func (b *Bus) StallFeed(clientID string) {
	b.mu.Lock()
	f := b.feeds[subjectPrefix+clientID]
	b.mu.Unlock()
	f.mu.Lock()
	f.consume.Stop()
	f.mu.Unlock()
}

// FeedRestarts is how many times the consumer of a world's feed was
// started again.
func (b *Bus) FeedRestarts(clientID string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.feeds[subjectPrefix+clientID].restarts.Load()
}
