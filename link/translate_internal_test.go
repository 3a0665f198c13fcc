package link

import "testing"

func TestWithUUID(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                       `{"uuid":"Actor.a"}`,
		` { }`:                     `{"uuid":"Actor.a" }`,
		`{"name":"x"}`:             `{"uuid":"Actor.a","name":"x"}`,
		`{"name":"x","uuid":"y"}`:  `{"name":"x","uuid":"y"}`,
		`{"items":[{"uuid":"z"}]}`: `{"uuid":"Actor.a","items":[{"uuid":"z"}]}`,
		`[1]`:                      `[1]`,
	} {
		if got := string(withUUID([]byte(in), "Actor.a")); got != want {
			t.Errorf("withUUID(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestLevelBelow(t *testing.T) {
	for _, c := range []struct {
		dir, entry string
		want       int
	}{
		{"", "maps", 1}, {"", "maps/a.png", 2}, {"maps", "maps/a.png", 1}, {"maps", "maps/x/y/a.png", 3}, {"maps", "/maps/a.png", 1},
	} {
		if got := levelBelow(c.dir, c.entry); got != c.want {
			t.Errorf("levelBelow(%q, %q) = %d, want %d", c.dir, c.entry, got, c.want)
		}
	}
}
