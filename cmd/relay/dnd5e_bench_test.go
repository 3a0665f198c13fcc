package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tabletop-relay/relay/relaytest"
)

// BenchmarkRESTSkillCheck is POST /dnd5e/skill-check as the actor's owner,
// through the full REST stack, from parallel clients. Each check rolls and
// posts its chat message: one committed transaction.
func BenchmarkRESTSkillCheck(b *testing.B) {
	benchDnd5e(b, "skill-check", fmt.Sprintf(`{"actorUuid":%q,"skill":"arc","userId":"Alice"}`, relaytest.AriaUUID))
}

// BenchmarkRESTSkillCheckNoChat is the same check without a chat message:
// a read and a roll, no write.
func BenchmarkRESTSkillCheckNoChat(b *testing.B) {
	benchDnd5e(b, "skill-check", fmt.Sprintf(`{"actorUuid":%q,"skill":"arc","userId":"Alice","createChatMessage":false}`, relaytest.AriaUUID))
}

// BenchmarkRESTShortRest is POST /dnd5e/short-rest with hit dice spent
// automatically: the actor, its items and the rest's chat card in one
// committed transaction.
func BenchmarkRESTShortRest(b *testing.B) {
	benchDnd5e(b, "short-rest", fmt.Sprintf(`{"actorUuid":%q,"autoHD":true,"autoHDThreshold":1,"userId":"Bob"}`, relaytest.BromUUID))
}

// benchDnd5e posts one ruleset request over and over.
func benchDnd5e(b *testing.B, op, body string) {
	r, key := benchRelay(b)
	c := benchClient()
	url := fmt.Sprintf("http://%s/dnd5e/%s", r.Addr(), op)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			doBench(b, c, req, []byte(body))
		}
	})
}
