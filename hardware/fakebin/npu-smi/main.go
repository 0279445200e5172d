// Command npu-smi is a fake of Huawei's npu-smi for nodes without Ascend
// NPUs: the real-node tests mount it into the Ascend plugin's pod where
// the host's npu-smi would be. It answers from hardware/npusmimock (the
// formats and refusals of npu-smi's recorded output) and keeps the
// server's state between calls in a file, as the driver keeps it between
// runs of the real tool: every vNPU command that succeeded is replayed on
// the next call. Like the driver, it makes a vdavinci<id> device node
// when a vNPU is created and removes it when the vNPU is destroyed.
//
// Its settings are in the JSON file named by the program's path plus
// ".json": {"model": "910B3", "npus": 8, "state": FILE, "devRoot": DIR}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-sh/strata/drivers/vendortool"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/npusmimock"
)

type settings struct {
	Model   string `json:"model"`
	NPUs    int    `json:"npus"`
	State   string `json:"state"`
	DevRoot string `json:"devRoot"`
}

func main() {
	out, code, err := run(os.Args[1:])
	os.Stdout.Write(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "npu-smi (fake):", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(args []string) ([]byte, int, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	raw, err := os.ReadFile(self + ".json")
	if err != nil {
		return nil, 0, err
	}
	var s settings
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, 0, fmt.Errorf("%s.json: %w", self, err)
	}
	// One call at a time, as the driver serialises vNPU changes.
	lock, err := os.OpenFile(s.State+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, 0, err
	}
	smi, err := npusmimock.New(s.Model, s.NPUs)
	if err != nil {
		return nil, 0, err
	}
	history, err := readHistory(s.State)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	for _, h := range history {
		if _, err := smi.Run(ctx, h...); err != nil {
			return nil, 0, fmt.Errorf("replaying %v from %s: %w", h, s.State, err)
		}
	}
	before := smi.VNPUs()
	out, err := smi.Run(ctx, args...)
	if exit, ok := errors.AsType[*vendortool.ExitError](err); ok {
		return out, exit.Code, nil
	}
	if err != nil {
		return out, 0, err
	}
	after := smi.VNPUs()
	if slices.Equal(before, after) {
		return out, 0, nil
	}
	if err := syncDeviceNodes(s.DevRoot, before, after); err != nil {
		return out, 0, err
	}
	return out, 0, writeHistory(s.State, append(history, args))
}

func readHistory(path string) ([][]string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var args []string
		if err := json.Unmarshal([]byte(line), &args); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		h = append(h, args)
	}
	return h, nil
}

func writeHistory(path string, h [][]string) error {
	var b strings.Builder
	for _, args := range h {
		line, _ := json.Marshal(args)
		b.Write(line)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// syncDeviceNodes makes the vdavinci nodes of new vNPUs and removes those
// of destroyed ones.
func syncDeviceNodes(devRoot string, before, after []int) error {
	if devRoot == "" {
		return nil
	}
	dir := filepath.Join(devRoot, "dev")
	for _, id := range after {
		if !slices.Contains(before, id) {
			p := filepath.Join(dir, fmt.Sprintf("vdavinci%d", id))
			dev := unix.Mkdev(hardware.AscendDavinciMajor, uint32(id))
			if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(dev)); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("mknod %s: %w", p, err)
			}
		}
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			if err := os.Remove(filepath.Join(dir, fmt.Sprintf("vdavinci%d", id))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
