// Package cnmon puts Cambricon's cnmon command line tool behind a Go
// interface: the Cambricon plugin lists a node's MLU cards, switches a
// card's sMLU mode, and creates, lists and destroys sMLU instances, all by
// running cnmon and parsing the text it prints.
//
// # Where the formats come from
//
//   - The card table (plain cnmon, cnmon -c N): verbatim captures of real
//     machines, kept under testdata/captures: two MLU370-X8 cards under
//     driver 5.10.22 (a Kylin V10 adaptation note) and 5.10.13 (PaddlePaddle
//     docs, mlu/install_cn.md), MLU370-X4 cards under 5.10.10 and 4.20.11
//     (PaddlePaddle docs, mlu_docs/paddle_install_cn.md). The "Mode" header
//     of 5.10.22 is also in a 5.10.31 capture (PaddleNLP's MLU guide). The
//     fake prints the rows from their values and its test compares them with
//     the captured lines byte for byte.
//   - cnmon info: the "    %-30s : %s" layout and the Product Name,
//     Firmware, Driver and Compute Mode keys of a real MLU370-X8 excerpt;
//     the "Card N" sections, the nested sections and their order (Health
//     State, Utilization/MLU Average, Temperature/Board/Chip/Memory,
//     Physical Memory Usage/Total/Used/Free, Power/Usage/Cap,
//     PCI/Domain ID/Bus num/Device/Function, Processes) from two parsers of
//     it, SwanLab's hardware collector (which reads "Card", "Product Name",
//     "Driver", Total one line and Used two lines under "Physical Memory
//     Usage", Chip two lines under "Temperature", Usage under "Power", and
//     skips a first banner line) and a test fixture of a system monitor
//     (the UUID line and the "====CNMON vX====" banner come from that
//     fixture only, which is not a verbatim capture). The parser takes any
//     banner naming CNMON, or none, and ignores keys it does not use.
//   - "not existed": Cambricon's own check scripts grep cnmon -c N and
//     cnmon info -c N for it to find the cards a server lacks; the Client
//     treats such output as an error whatever the exit status.
//   - cnmon set -c N -smlu on: HAMi's Cambricon guide.
//   - The sMLU subcommand: no public source shows it (the CNMon manual is
//     behind Cambricon's developer portal; the device plugin, HAMi and
//     Koordinator drive sMLU through the cnDev library). DefaultSMLUSyntax
//     and the listing and messages of the testdata are this package's, in
//     cnmon's own option and listing styles; no capture of them from a
//     real host exists. The arguments can be replaced at run time
//     (ParseSMLUSyntax; the plugin's --smlu-info-args, --smlu-create-args
//     and --smlu-destroy-args) once checked on a real host; the listing and
//     messages are still parsed as this package expects them. What they carry follows the
//     driver's sMLU sources (smlu/smlu_core.c, smlu/smlu_cgroup.c) and
//     cnDev's cndevSMluInfo_t: an instance has an MLU quota in percent
//     (the card's total is 100) and a memory size, each refused when it
//     exceeds what the card's other instances leave ("-EFAULT represents
//     exceed, be consistent with cnmon"); instance ids are the lowest free
//     from 1, per card; the capability node is
//     /dev/cambricon-caps/cap_dev<card>_mi<id>; the driver sets the tenth
//     byte of the card's UUID to the instance id (printed, this package
//     assumes, as the second byte of the fourth group); profiles are named
//     "<quota>p.<MiB>mb" and the driver starts every card with three, the
//     whole card, a half and a quarter. The driver refuses to switch sMLU
//     mode while the card is open ("This card is busy") and off while
//     instances exist ("Must destroy all instances before sMLU OFF"), and
//     to destroy an instance a process uses. sMLU needs driver 5.10.27 or
//     later (Cambricon's device plugin README).
//
// # MLU370-X8
//
// An MLU370-X8 board carries two MLU370 chips and cnmon lists each as a
// card with its own bus id and /dev/cambricon_devN (both captures show an
// X8 board as two cards, 0000:39/3D and 0000:13/16); the board's 48 GB are
// 24 GB per chip, printed as 23374 MiB with inline ECC off (Ecc-Error N/A)
// and 20638 MiB with it on. A server of eight boards therefore has sixteen
// cards, which Cambricon's own scripts expect (max_card_num=16) and which
// the device plugin splits into two MLU-Link groups of eight. Each chip has
// four clusters of four MLU cores (the driver's MLU370 attribute table).
// The device plugin pairs the chips of a board by their card serial
// number and reads MLU-Link peers from cnDev; no cnmon output found prints
// either, so Card carries neither.
//
// # Decisions
//
//   - cnmon's exit statuses are not public: set and sMLU commands succeed
//     by their output ("Create sMLU instance N on card C success"), never
//     by the exit status alone, and every failure quotes what cnmon printed.
//   - Cards runs the table once and cnmon info -c N per card, and checks
//     that both name the same product, bus and memory.
//   - Bus ids are printed upper-case ("0000:3D:00.0"); Card.BusID holds the
//     kernel's lower-case form.
//   - MLU cores are not printed by cnmon; Card.MLUCores comes from a table
//     of the MLU370 boards (ModelCores).
//
// # Device nodes
//
// The driver (device/cnhost_dev.c) allocates four character regions with
// alloc_chrdev_region, so every major is dynamic; their /proc/devices
// names are "cambricon_ctl" (/dev/cambricon_ctl, one minor),
// "cambricon_dev" (/dev/cambricon_devN, 128 minors from an idr, the node
// named after the card index), "cambricon_mi_cap" and "cambricon_smlu_cap"
// (1024 minors each; the class's devnode puts both under
// /dev/cambricon-caps/, as cap_devN_miM). /dev/cambricon_ipcmN is a
// "cn_rpmsg" region (ipcm/rpmsg/rpmsg_char.c) and /dev/commuN one "commu"
// region per card. A container gets /dev/cambricon_ctl and, per card,
// /dev/cambricon_devN, /dev/cambricon_ipcmN (and commuN where present); an
// sMLU adds its cap node to its card's two, which the device plugin's
// dynamic-smlu mode passes as
// "/dev/cambricon_devN,/dev/cambricon_ipcmN,/dev/cambricon-caps/cap_devN_miM".
package cnmon
