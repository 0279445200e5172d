package npusmi

import (
	"context"
	"fmt"
	"strings"
)

// Health states npu-smi prints in "Health Status" (Huawei's npu-smi
// command reference: OK healthy, Warning a minor alarm, Alarm a major one,
// Critical an urgent one).
const (
	HealthOK       = "OK"
	HealthWarning  = "Warning"
	HealthAlarm    = "Alarm"
	HealthCritical = "Critical"
)

// Health is a chip's health as npu-smi info -t health -i N -c C prints it:
//
//	Health Status                  : OK
//	Error Code                     : NA
//	Error Information              : NA
//
// That healthy output is verbatim in Huawei's MindCluster FaultDiag
// documentation (testdata/health-ok.txt). No public capture of a faulty
// chip's output was found: the fields of a faulty one follow the same
// command reference (the state word, the chip's hexadecimal fault codes
// and their description), and the fake prints codes separated by spaces.
type Health struct {
	// Status is one of the Health constants as printed.
	Status string
	// ErrorCodes are the fault codes ("80E01801"); none for NA.
	ErrorCodes []string
	// ErrorInfo describes them; "" for NA.
	ErrorInfo string
}

// Healthy reports whether the chip may take work: OK, or a Warning (a
// minor alarm, which Huawei's reference says does not affect service).
// Every other state, one this package does not know included, is not.
func (h Health) Healthy() bool { return h.Status == HealthOK || h.Status == HealthWarning }

// ParseHealth parses npu-smi info -t health -i N -c C.
func ParseHealth(out []byte) (Health, error) {
	const what = "info -t health"
	m, _, err := parseKV(what, out)
	if err != nil {
		return Health{}, err
	}
	h := Health{Status: m["Health Status"]}
	if h.Status == "" {
		return Health{}, fmt.Errorf("npu-smi %s: no Health Status line in %q", what, firstLine(out))
	}
	if v := m["Error Code"]; v != "" && v != "NA" {
		h.ErrorCodes = strings.Fields(strings.ReplaceAll(v, ",", " "))
	}
	if v := m["Error Information"]; v != "NA" {
		h.ErrorInfo = v
	}
	return h, nil
}

// Health returns a chip's health.
func (c *Client) Health(ctx context.Context, card, chip int) (Health, error) {
	out, err := c.run(ctx, "info", "-t", "health", "-i", itoa(card), "-c", itoa(chip))
	if err != nil {
		return Health{}, err
	}
	return ParseHealth(out)
}
