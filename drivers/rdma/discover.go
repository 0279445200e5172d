package rdma

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/drivers/devnum"
	"github.com/strata-sh/strata/drivers/pci"
)

// port is one RDMA device as sysfs shows it: a NIC's physical function
// or one of its SR-IOV virtual functions.
type port struct {
	// name is the DRA device name; rdmaDev the kernel's (mlx5_0).
	name    string
	rdmaDev string
	netdev  string
	busID   string
	// pf is the physical function for a VF (nil for a PF); vfIndex its
	// index among the PF's VFs.
	pf      *port
	vfIndex int
	vfs     []*port

	vendorID, deviceID string
	linkLayer          string
	state              string
	rateGbps           int64
	guid, mac          string
	// verbs and umad are the character devices' numbers ("231:192");
	// umad is empty on Ethernet ports.
	verbs, umad devNumber
	umadIndex   int
	verbsIndex  int
	totalVFs    int
	numVFs      int
	rail        int
	topology    pci.Topology
}

func (p *port) isVF() bool { return p.pf != nil }

// devNumber is a character device's major and minor.
type devNumber struct{ major, minor int64 }

func (d devNumber) valid() bool { return d.major > 0 }

// discoverPorts walks /sys/class/infiniband: every RDMA device, resolved
// to the PCI function that carries it. Works for any RDMA driver that
// registers with the kernel's RDMA core (mlx5, bnxt_re, irdma, efa).
func discoverPorts(sysfs string, topo *pci.Reader, rails []string) ([]*port, devNumber, error) {
	classDir := filepath.Join(sysfs, "class", "infiniband")
	entries, err := os.ReadDir(classDir)
	if os.IsNotExist(err) {
		return nil, devNumber{}, nil
	}
	if err != nil {
		return nil, devNumber{}, err
	}
	byBus := map[string]*port{}
	var all []*port
	for _, e := range entries {
		p, err := readPort(classDir, e.Name())
		if err != nil {
			return nil, devNumber{}, fmt.Errorf("RDMA device %s: %w", e.Name(), err)
		}
		if p.topology, err = topo.Lookup(p.busID); err != nil {
			return nil, devNumber{}, fmt.Errorf("RDMA device %s: PCI topology: %w", e.Name(), err)
		}
		byBus[p.busID] = p
		all = append(all, p)
	}
	// Link VFs to their PFs.
	var pfs []*port
	for _, p := range all {
		if p.pf == nil {
			pfs = append(pfs, p)
			continue
		}
		pf, ok := byBus[p.pf.busID]
		if !ok {
			return nil, devNumber{}, fmt.Errorf("RDMA device %s: its physical function %s has no RDMA device", p.rdmaDev, p.pf.busID)
		}
		p.pf = pf
		p.linkLayerFromPF()
		pf.vfs = append(pf.vfs, p)
	}
	sort.Slice(pfs, func(i, j int) bool { return pfs[i].busID < pfs[j].busID })
	if err := assignRails(pfs, rails); err != nil {
		return nil, devNumber{}, err
	}
	var out []*port
	for _, pf := range pfs {
		out = append(out, pf)
		sort.Slice(pf.vfs, func(i, j int) bool { return pf.vfs[i].vfIndex < pf.vfs[j].vfIndex })
		for _, vf := range pf.vfs {
			vf.rail = pf.rail
			out = append(out, vf)
		}
	}
	var cm devNumber
	if len(out) > 0 {
		if cm, err = readDevFile(filepath.Join(sysfs, "class", "misc", "rdma_cm", "dev")); err != nil {
			return nil, devNumber{}, fmt.Errorf("rdma_cm: %w", err)
		}
	}
	return out, cm, nil
}

// linkLayerFromPF fills what a VF does not report on its own.
func (p *port) linkLayerFromPF() {
	if p.linkLayer == "" {
		p.linkLayer = p.pf.linkLayer
	}
	if p.rateGbps == 0 {
		p.rateGbps = p.pf.rateGbps
	}
}

// assignRails numbers the PFs' rails: in the order rails names their RDMA
// devices when given (each at most once, and each a PF of this node; PFs
// left out, such as storage or in-band NICs, get no rail), else in PCI
// address order.
func assignRails(pfs []*port, rails []string) error {
	if len(rails) == 0 {
		for i, p := range pfs {
			p.rail = i
		}
		return nil
	}
	index := map[string]int{}
	for i, r := range rails {
		if _, dup := index[r]; dup {
			return fmt.Errorf("rail devices: %s is listed twice", r)
		}
		index[r] = i
	}
	for _, p := range pfs {
		i, ok := index[p.rdmaDev]
		if !ok {
			p.rail = -1
			continue
		}
		p.rail = i
		delete(index, p.rdmaDev)
	}
	for r := range index {
		return fmt.Errorf("rail devices: %s is not an RDMA physical function of this node", r)
	}
	return nil
}

// readPort reads one /sys/class/infiniband/<name> entry.
func readPort(classDir, name string) (*port, error) {
	ibDir, err := filepath.EvalSymlinks(filepath.Join(classDir, name))
	if err != nil {
		return nil, err
	}
	fnDir := filepath.Dir(filepath.Dir(ibDir)) // <pci function>/infiniband/<name>
	p := &port{rdmaDev: name, busID: filepath.Base(fnDir), rail: -1}
	p.vendorID = readTrim(filepath.Join(fnDir, "vendor"))
	p.deviceID = readTrim(filepath.Join(fnDir, "device"))
	if target, err := os.Readlink(filepath.Join(fnDir, "physfn")); err == nil {
		p.pf = &port{busID: filepath.Base(target)}
		p.vfIndex = -1
	}
	portDir := filepath.Join(ibDir, "ports", "1")
	p.linkLayer = readTrim(filepath.Join(portDir, "link_layer"))
	p.state = stateName(readTrim(filepath.Join(portDir, "state")))
	p.rateGbps = parseRate(readTrim(filepath.Join(portDir, "rate")))
	p.guid = readTrim(filepath.Join(ibDir, "node_guid"))
	if nets, err := os.ReadDir(filepath.Join(fnDir, "net")); err == nil && len(nets) > 0 {
		p.netdev = nets[0].Name()
		if p.linkLayer == linkEthernet {
			p.mac = readTrim(filepath.Join(fnDir, "net", p.netdev, "address"))
		}
	}
	if p.verbs, p.verbsIndex, err = classDevice(filepath.Join(fnDir, "infiniband_verbs"), "uverbs", name); err != nil {
		return nil, err
	}
	if !p.verbs.valid() {
		return nil, fmt.Errorf("no uverbs device (is ib_uverbs loaded?)")
	}
	if p.umad, p.umadIndex, err = classDevice(filepath.Join(fnDir, "infiniband_mad"), "umad", name); err != nil {
		return nil, err
	}
	if p.pf == nil {
		p.totalVFs, _ = strconv.Atoi(readTrim(filepath.Join(fnDir, "sriov_totalvfs")))
		p.numVFs, _ = strconv.Atoi(readTrim(filepath.Join(fnDir, "sriov_numvfs")))
	} else {
		// The VF's index is the PF's virtfn<N> link that points at it.
		links, _ := filepath.Glob(filepath.Join(filepath.Dir(fnDir), p.pf.busID, "virtfn*"))
		for _, l := range links {
			if t, err := os.Readlink(l); err == nil && filepath.Base(t) == p.busID {
				p.vfIndex, _ = strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
			}
		}
		if p.vfIndex < 0 {
			return nil, fmt.Errorf("no virtfn link of %s points at VF %s", p.pf.busID, p.busID)
		}
	}
	return p, nil
}

// classDevice finds the <prefix>N entry of dir whose ibdev is name, and
// returns its device numbers and N.
func classDevice(dir, prefix, name string) (devNumber, int, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return devNumber{}, -1, nil
	}
	if err != nil {
		return devNumber{}, -1, err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || readTrim(filepath.Join(dir, e.Name(), "ibdev")) != name {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), prefix))
		if err != nil {
			continue
		}
		d, err := readDevFile(filepath.Join(dir, e.Name(), "dev"))
		return d, n, err
	}
	return devNumber{}, -1, nil
}

func readDevFile(path string) (devNumber, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return devNumber{}, err
	}
	var d devNumber
	if _, err := fmt.Sscanf(strings.TrimSpace(string(raw)), "%d:%d", &d.major, &d.minor); err != nil ||
		d.major < 0 || d.major > devnum.MaxMajor || d.minor < 0 || d.minor > devnum.MaxMinor {
		return devNumber{}, fmt.Errorf("%s: %q is not major:minor", path, strings.TrimSpace(string(raw)))
	}
	return d, nil
}

func readTrim(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// stateName turns "4: ACTIVE" into "ACTIVE".
func stateName(s string) string {
	if i := strings.Index(s, ":"); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

// parseRate reads "400 Gb/sec (4X NDR)" as 400; 0 when unknown.
func parseRate(s string) int64 {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	// No port runs faster than a petabit: anything else is not a rate.
	if err != nil || math.IsNaN(v) || v < 0 || v > 1e6 {
		return 0
	}
	switch f[1] {
	case "Gb/sec":
		return int64(v)
	case "Mb/sec":
		return int64(v / 1000)
	}
	return 0
}

// models names ConnectX and BlueField adapters by PCI device id.
var models = map[string]string{
	"0x1017": "ConnectX-5",
	"0x1019": "ConnectX-5 Ex",
	"0x101b": "ConnectX-6",
	"0x101d": "ConnectX-6 Dx",
	"0x101f": "ConnectX-6 Lx",
	"0x1021": "ConnectX-7",
	"0x1023": "ConnectX-8",
	"0xa2d6": "BlueField-2",
	"0xa2dc": "BlueField-3",
}
