package cnmon

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Default argument templates of the sMLU commands: DefaultSMLUSyntax
// written as templates (see ParseSMLUSyntax). No public capture of cnmon's
// sMLU subcommand exists (see SMLUSyntax): these are this package's
// choice, and a host whose cnmon spells them differently is configured
// with other templates, never with a code change.
const (
	DefaultSMLUInfoArgs    = "smlu -c {card} -info"
	DefaultSMLUCreateArgs  = "smlu -c {card} -create -mlu {vcore} -mem {memoryMiB}"
	DefaultSMLUDestroyArgs = "smlu -c {card} -destroy {id}"
)

var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// argsTemplate is one command's argument list with placeholders.
type argsTemplate []string

// parseArgs splits a template into arguments at spaces and checks that
// it uses exactly the placeholders of its command.
func parseArgs(what, tmpl string, want ...string) (argsTemplate, error) {
	args := strings.Fields(tmpl)
	if len(args) == 0 {
		return nil, fmt.Errorf("sMLU %s arguments are empty", what)
	}
	seen := map[string]bool{}
	for _, a := range args {
		for _, p := range placeholder.FindAllString(a, -1) {
			if !slices.Contains(want, p) {
				return nil, fmt.Errorf("sMLU %s arguments %q: unknown placeholder %s (want %s)", what, tmpl, p, strings.Join(want, ", "))
			}
			seen[p] = true
		}
		if strings.ContainsAny(placeholder.ReplaceAllString(a, ""), "{}") {
			return nil, fmt.Errorf("sMLU %s arguments %q: unbalanced brace in %q", what, tmpl, a)
		}
	}
	var errs []error
	for _, p := range want {
		if !seen[p] {
			errs = append(errs, fmt.Errorf("sMLU %s arguments %q lack %s", what, tmpl, p))
		}
	}
	return args, errors.Join(errs...)
}

// expand substitutes the values into the template.
func (t argsTemplate) expand(values map[string]string) []string {
	out := make([]string, len(t))
	for i, a := range t {
		out[i] = placeholder.ReplaceAllStringFunc(a, func(p string) string { return values[p] })
	}
	return out
}

// ParseSMLUSyntax builds an SMLUSyntax from argument templates, one per
// command: arguments separated by spaces, with placeholders {card} (the
// card index), {vcore} (the MLU quota in percent), {memoryMiB} (the
// memory in MiB) and {id} (the instance id). info takes {card}; create
// {card}, {vcore} and {memoryMiB}; destroy {card} and {id}. Each must use
// exactly its own, so that a template cannot silently drop a value.
// What cnmon prints in answer is still parsed as ParseSMLUInfo,
// ParseCreateSMLU and ParseDestroySMLU expect.
func ParseSMLUSyntax(info, create, destroy string) (SMLUSyntax, error) {
	i, err1 := parseArgs("info", info, "{card}")
	c, err2 := parseArgs("create", create, "{card}", "{vcore}", "{memoryMiB}")
	d, err3 := parseArgs("destroy", destroy, "{card}", "{id}")
	if err := errors.Join(err1, err2, err3); err != nil {
		return SMLUSyntax{}, err
	}
	return SMLUSyntax{
		Info: func(card int) []string { return i.expand(map[string]string{"{card}": itoa(card)}) },
		Create: func(card, vcorePercent int, memoryMB int64) []string {
			return c.expand(map[string]string{"{card}": itoa(card), "{vcore}": itoa(vcorePercent), "{memoryMiB}": strconv.FormatInt(memoryMB, 10)})
		},
		Destroy: func(card, id int) []string {
			return d.expand(map[string]string{"{card}": itoa(card), "{id}": itoa(id)})
		},
	}, nil
}
