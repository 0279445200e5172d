package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as aligned text tables.
func (r *Report) WriteTable(w io.Writer) error {
	s := r.Summary
	title := "Cluster"
	if r.Cluster != "" {
		title += " " + r.Cluster
	}
	fmt.Fprintf(w, "%s: %d nodes, %d pods (%d running, %d pending, %d failed), %d/%d claims allocated, %d/%d devices allocated\n\n",
		title, s.Nodes, s.Pods, s.Running, s.Pending, s.Failed, s.AllocatedClaims, s.Claims, s.AllocatedDevices, s.PublishedDevices)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tNODE\tPHASE\tCLAIM\tDEVICES")
	for _, p := range r.Pods {
		node := p.Node
		if node == "" {
			node = "<none>"
		}
		if len(p.Claims) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\n", p.Namespace, p.Name, node, p.Phase)
		}
		for i, c := range p.Claims {
			ns, name, n, phase := p.Namespace, p.Name, node, p.Phase
			if i > 0 {
				ns, name, n, phase = "", "", "", ""
			}
			devs := deviceList(c.Devices)
			if len(c.Matched) > 0 {
				devs += " (" + strings.Join(c.Matched, ", ") + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ns, name, n, phase, c.Name, devs)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(r.Gangs) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GANG\tMIN\tRUNNING\tPLACED IN")
		for _, g := range r.Gangs {
			placed := strings.Join(g.Domains, ", ")
			if placed == "" {
				placed = "-"
			}
			fmt.Fprintf(tw, "%s/%s\t%d\t%d/%d\t%s\n", g.Namespace, g.Name, g.MinMember, g.Running, g.Pods, placed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	writeObserved(w, r.Pods)

	var pending []Pod
	for _, p := range r.Pods {
		if p.Reason != "" {
			pending = append(pending, p)
		}
	}
	if len(pending) > 0 {
		fmt.Fprintln(w, "\nNot running:")
		for _, p := range pending {
			fmt.Fprintf(w, "  %s/%s: %s: %s\n", p.Namespace, p.Name, p.Reason, oneLine(p.Message))
		}
	}
	for _, g := range r.Gangs {
		if g.Message != "" {
			fmt.Fprintf(w, "  gang %s/%s: %s\n", g.Namespace, g.Name, oneLine(g.Message))
		}
	}
	if len(r.Uncontrolled) > 0 {
		fmt.Fprintln(w, "\nApplied, but no controller runs them here:")
		for _, o := range r.Uncontrolled {
			name := o.Name
			if o.Namespace != "" {
				name = o.Namespace + "/" + o.Name
			}
			fmt.Fprintf(w, "  %s %s (%s): %s\n", o.Kind, name, o.APIVersion, o.Message)
		}
	}
	first := true
	for _, g := range r.Gangs {
		if g.Preempted == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nPreempted for gangs:")
			first = false
		}
		fmt.Fprintf(w, "  %s/%s: %s\n", g.Namespace, g.Name, oneLine(g.Preempted))
	}
	return nil
}

func deviceList(devs []Device) string {
	if len(devs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(devs))
	for _, d := range devs {
		part := fmt.Sprintf("%s/%s/%s", d.Driver, d.Pool, d.Device)
		if len(d.Consumed) > 0 {
			names := make([]string, 0, len(d.Consumed))
			for name := range d.Consumed {
				names = append(names, name)
			}
			sort.Strings(names)
			for i, name := range names {
				names[i] = name + "=" + d.Consumed[name]
			}
			part += " (" + strings.Join(names, ",") + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeObserved lists what the containers of pods on real nodes reported
// having: device nodes, accelerator environment and mounts beyond every
// container's.
func writeObserved(w io.Writer, pods []Pod) {
	header := false
	for _, p := range pods {
		names := make([]string, 0, len(p.Containers))
		for name, c := range p.Containers {
			if c.Observed {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if !header {
				fmt.Fprintln(w, "\nSeen by the containers of pods on real nodes:")
				header = true
			}
			c := p.Containers[name]
			var parts []string
			if len(c.DeviceNodes) > 0 {
				parts = append(parts, strings.Join(c.DeviceNodes, " "))
			}
			if len(c.Env) > 0 {
				parts = append(parts, strings.Join(c.Env, " "))
			}
			if len(c.Mounts) > 0 {
				parts = append(parts, "mounts "+strings.Join(c.Mounts, " "))
			}
			if len(parts) == 0 {
				parts = []string{"no device"}
			}
			fmt.Fprintf(w, "  %s/%s/%s: %s\n", p.Namespace, p.Name, name, strings.Join(parts, "; "))
		}
	}
}
