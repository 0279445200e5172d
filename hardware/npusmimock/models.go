package npusmimock

// Models the fake can be: the chip name npu-smi prints.
const (
	// Model910B3 is an Atlas 800T A2: Ascend 910B3 NPUs, one chip and an
	// MCU per NPU, 64 GB HBM and 20 AI cores per chip.
	Model910B3 = "910B3"
	// Model910A is an Atlas 800 training server (model 9000): Ascend 910A
	// NPUs, 32 GB HBM and 32 AI cores per chip.
	Model910A = "910A"
)

// tmpl is a vNPU template as npu-smi info -t template-info prints it.
type tmpl struct {
	name   string
	aicore int
	memGB  int
	aicpu  int
	vpc    int
	venc   int
	jpegd  int
	pngd   int
	vdec   int
	jpege  int
}

// na marks a resource npu-smi prints as NA.
const na = -1

// media indexes resource totals in info-vnpu order after AICPU.
const (
	mVPC = iota
	mVENC
	mVDEC
	mJPEGD
	mJPEGE
	mPNGD
	mCount
)

func (t tmpl) media() [mCount]int {
	return [mCount]int{t.vpc, t.venc, t.vdec, t.jpegd, t.jpege, t.pngd}
}

// spec is what one server model looks like to npu-smi.
type spec struct {
	chipName string
	busIDs   []string
	hasMCU   bool
	// is910B selects npu-smi's NPU_CHIP_910B code paths: the HBM total of
	// info-vnpu rounded up to 32 or 64 GB, the AI CPU and DVPP checks of
	// create-vnpu, vGroup ids, product name lines on the board.
	is910B  bool
	aiCores int
	hbmMB   int64
	// reservedGB is HBM the driver keeps: an idle 64 GB 910B shows
	// "60/64" in info-vnpu.
	reservedGB int
	// aicpu is the AI CPU total of an idle chip, aicpuSRIOV once the first
	// vNPU turned SR-IOV on and a data CPU became an AI CPU ("6/6" then
	// "x/7" on 910B); na where the tool prints NA (Atlas training
	// products).
	aicpu, aicpuSRIOV int
	media             [mCount]int
	templates         []tmpl
	// createHelp is the template list of npu-smi's create-vnpu usage.
	createHelp string

	// Illustrative board, memory and common values.
	productName    string
	software       string
	firmware       string
	boardID        int
	pciDeviceID    string
	subsysDeviceID string
	aicoreFreq     int
	aicoreCurFreq  int
	hbmClock       int
	ddrMB          []int64
	ddrClock       int
	hbmUsage       int
}

func specFor(model string) (*spec, bool) {
	switch model {
	case Model910B3:
		return &spec{
			chipName: "910B3",
			busIDs: []string{"0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
				"0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"},
			hasMCU: true, is910B: true,
			aiCores: 20, hbmMB: 65536, reservedGB: 4,
			aicpu: 6, aicpuSRIOV: 7,
			media: [mCount]int{mVPC: 9, mVENC: 0, mVDEC: 2, mJPEGD: 24, mJPEGE: 4, mPNGD: na},
			// template_name_910b_bin1, values of a 64 GB 910B BIN1 capture.
			templates: []tmpl{
				{name: "vir10_3c_32g", aicore: 10, memGB: 32, aicpu: 3, vpc: 4, venc: 0, jpegd: 12, pngd: 0, vdec: 1, jpege: 2},
				{name: "vir05_1c_16g", aicore: 5, memGB: 16, aicpu: 1, vpc: 2, venc: 0, jpegd: 6, pngd: 0, vdec: 0, jpege: 1},
			},
			createHelp:  "vir10_3c_32g, vir05_1c_16g",
			productName: "IT21DMDA", software: "24.1.0", firmware: "7.5.0.5.220",
			boardID: 0x65, pciDeviceID: "0xD802", subsysDeviceID: "0x3000",
			aicoreFreq: 1800, aicoreCurFreq: 800, hbmClock: 1600, hbmUsage: 5,
		}, true
	case Model910A:
		return &spec{
			chipName: "910A",
			busIDs: []string{"0000:C1:00.0", "0000:81:00.0", "0000:41:00.0", "0000:01:00.0",
				"0000:C2:00.0", "0000:82:00.0", "0000:42:00.0", "0000:02:00.0"},
			aiCores: 32, hbmMB: 32768,
			aicpu: na, aicpuSRIOV: na,
			// Huawei's product table for Atlas training products.
			media: [mCount]int{mVPC: 16, mVENC: na, mVDEC: 16, mJPEGD: 16, mJPEGE: 8, mPNGD: 24},
			// template_name_910 order; resources of Huawei's template table.
			templates: []tmpl{
				{name: "vir02", aicore: 2, memGB: 2, aicpu: 1, vpc: 1, jpegd: 1, pngd: 1, vdec: 1, jpege: 0},
				{name: "vir04", aicore: 4, memGB: 4, aicpu: 1, vpc: 2, jpegd: 2, pngd: 3, vdec: 2, jpege: 1},
				{name: "vir08", aicore: 8, memGB: 8, aicpu: 3, vpc: 4, jpegd: 4, pngd: 6, vdec: 4, jpege: 2},
				{name: "vir16", aicore: 16, memGB: 16, aicpu: 7, vpc: 8, jpegd: 8, pngd: 12, vdec: 8, jpege: 4},
			},
			createHelp: "vir02, vir04, vir08, vir16",
			software:   "23.0.0", firmware: "7.1.0.4.218",
			boardID: 0x02, pciDeviceID: "0xD801", subsysDeviceID: "0x0100",
			aicoreFreq: 1000, aicoreCurFreq: 1000, hbmClock: 1200,
			ddrMB:    []int64{14795, 15177, 15177, 15088, 14795, 15177, 15177, 15088},
			ddrClock: 2666,
		}, true
	}
	return nil, false
}
