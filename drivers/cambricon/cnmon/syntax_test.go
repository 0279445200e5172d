package cnmon

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The default templates are DefaultSMLUSyntax.
func TestDefaultTemplatesAreDefaultSyntax(t *testing.T) {
	s, err := ParseSMLUSyntax(DefaultSMLUInfoArgs, DefaultSMLUCreateArgs, DefaultSMLUDestroyArgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want []string }{
		{s.Info(3), DefaultSMLUSyntax.Info(3)},
		{s.Create(3, 25, 5843), DefaultSMLUSyntax.Create(3, 25, 5843)},
		{s.Destroy(3, 2), DefaultSMLUSyntax.Destroy(3, 2)},
	} {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("(-default +template):\n%s", diff)
		}
	}
}

// recorder answers every command with the recorded outputs of a card 0
// holding instance 1, and records what it was asked.
type recorder struct{ cmds [][]string }

func (r *recorder) Run(_ context.Context, args ...string) ([]byte, error) {
	r.cmds = append(r.cmds, args)
	switch {
	case strings.Contains(strings.Join(args, " "), "list"):
		return []byte("Card 0\n    sMLU Mode                      : Enable\n    Instance Count                 : 1\n    Instance                       : 1\n        Profile ID                 : 3\n        Profile Name               : 25p.5843mb\n        UUID                       : 89033010-2354-0000-0001-000000000000\n        Device Node                : /dev/cambricon-caps/cap_dev0_mi1\n        MLU Quota                  : 25 %\n        Memory                     : 5843 MiB\n"), nil
	case strings.Contains(strings.Join(args, " "), "new"):
		return []byte("Create sMLU instance 1 on card 0 success\n"), nil
	default:
		return []byte("Destroy sMLU instance 1 on card 0 success\n"), nil
	}
}

// A configured syntax is what the Client runs.
func TestConfiguredSyntaxIsExecuted(t *testing.T) {
	s, err := ParseSMLUSyntax("dsmlu list --card={card}", "dsmlu new --card={card} --quota {vcore} --mem {memoryMiB}MiB", "dsmlu rm --card={card} {id}")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	c := &Client{Runner: r, SMLU: s}
	ctx := context.Background()
	if _, err := c.CreateSMLU(ctx, 0, 25, 5843); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroySMLU(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"dsmlu", "new", "--card=0", "--quota", "25", "--mem", "5843MiB"},
		{"dsmlu", "list", "--card=0"},
		{"dsmlu", "rm", "--card=0", "1"},
	}
	if diff := cmp.Diff(want, r.cmds); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}

func TestParseSMLUSyntaxRefusesBadTemplates(t *testing.T) {
	for _, c := range []struct {
		name, info, create, destroy, want string
	}{
		{"empty", "", DefaultSMLUCreateArgs, DefaultSMLUDestroyArgs, "sMLU info arguments are empty"},
		{"missing memory", DefaultSMLUInfoArgs, "smlu -c {card} -create -mlu {vcore}", DefaultSMLUDestroyArgs, "lack {memoryMiB}"},
		{"unknown placeholder", DefaultSMLUInfoArgs, DefaultSMLUCreateArgs, "smlu -c {card} -destroy {instance}", "unknown placeholder {instance}"},
		{"placeholder of another command", "smlu -c {card} -info {id}", DefaultSMLUCreateArgs, DefaultSMLUDestroyArgs, "unknown placeholder {id}"},
		{"unbalanced", DefaultSMLUInfoArgs, DefaultSMLUCreateArgs, "smlu -c {card} -destroy {id", "unbalanced brace"},
	} {
		_, err := ParseSMLUSyntax(c.info, c.create, c.destroy)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
